"""File helpers every stage shares: atomic writes and strict, located readers.

Readers name the file and the 1-based line or row of any problem; writers go through a
temporary file in the same folder and `os.replace`, so a crash never leaves a half-written
file that looks whole.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcw.errors import RlcwError, location

TABLE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_save_tensors(tensors: dict, path: str | Path, metadata: dict[str, str] | None = None) -> Path:
    """`tensors` (name -> torch tensor) as safetensors with optional string `metadata`, atomically (temp file in the
    same folder, then rename)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    """Write `obj` as indented JSON, atomically."""
    return atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def atomic_write_jsonl(path: str | Path, rows: Iterable[dict]) -> Path:
    """Write one JSON object per line, atomically."""
    text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    return atomic_write_text(path, text)


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Write a folder (a saved model) atomically: yield a temp folder beside `path`, rename it on success.

    A crash or an exception leaves `path` as it was (absent or the previous complete folder) and
    removes the temp folder; an existing `path` is replaced only once the new folder is whole.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        yield tmp
        if path.exists():
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def append_jsonl(path: str | Path, row: dict) -> None:
    """Append one JSON line (metrics logs); a torn last line is skipped by `read_jsonl(lenient_tail)`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _require_file(path: Path) -> None:
    if not path.exists():
        raise RlcwError(
            "file not found", where=str(path), hint="check the path (relative paths are from the current folder)"
        )
    if path.is_dir():
        raise RlcwError("expected a file, found a folder", where=str(path))


def _read_utf8(path: Path) -> str:
    _require_file(path)
    data = path.read_bytes()
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # Excel's "Unicode text" and Windows tools save UTF-16
        raise RlcwError(
            "the file is UTF-16 (it starts with a UTF-16 byte-order mark), not UTF-8",
            where=location(path, 1),
            hint="save it as UTF-8 (in Excel: CSV UTF-8), or `iconv -f utf-16 -t utf-8 IN > OUT`",
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise RlcwError(
            f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            where=location(path, line),
            hint="re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 IN > OUT`",
        ) from None
    text = text.removeprefix("\ufeff")  # a byte-order mark (spreadsheet exports): not part of the first header/key
    if not text.strip():
        raise RlcwError("file is empty", where=str(path), hint="expected at least one record")
    return text


def jsonl_lines(text: str) -> list[str]:
    """The non-blank lines of JSON Lines text, split at "\\n" only: `str.splitlines` also splits at U+2028, U+2029,
    U+0085 and other separators, which a JSON string may hold unescaped (`json.dumps(..., ensure_ascii=False)` writes
    them raw, and generated stories contain them)."""
    return [line for line in text.split("\n") if line.strip()]


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield `(line_number, object)` for each non-blank line; errors name file and line."""
    path = Path(path)
    for lineno, line in enumerate(_read_utf8(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RlcwError(
                f"broken JSON ({exc.msg} at column {exc.colno})",
                where=location(path, lineno),
                hint="each line must be one complete JSON object",
            ) from None
        if not isinstance(obj, dict):
            raise RlcwError(f"expected a JSON object, got {type(obj).__name__}", where=location(path, lineno))
        yield lineno, obj


def read_json(path: str | Path, what: str, hint: str | None = None) -> Any:
    """The value of a JSON file rlcw wrote (a spec, manifest, summary, key): one that is not UTF-8 JSON is an error
    naming the file (`what`: how the message calls it; `hint`: how to get a sound one)."""
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RlcwError(f"corrupt {what}: {exc}", where=str(path), hint=hint) from None


def read_jsonl(path: str | Path) -> list[dict]:
    """Read a jsonl file into a list of objects (strict; see `iter_jsonl`)."""
    return [obj for _, obj in iter_jsonl(path)]


def read_table(path: str | Path) -> list[tuple[int, dict]]:
    """Read jsonl / json (list of objects) / csv / parquet into `(row_number, dict)` pairs.

    Row numbers are 1-based lines for jsonl, 1-based data rows (header excluded) otherwise.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(iter_jsonl(path))
    if suffix == ".json":
        text = _read_utf8(path)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RlcwError(f"broken JSON ({exc.msg})", where=location(path, exc.lineno)) from None
        if not isinstance(data, list):
            raise RlcwError("expected a JSON list of objects", where=str(path), hint="or use .jsonl")
        for row, item in enumerate(data, start=1):
            if not isinstance(item, dict):
                raise RlcwError(
                    f"expected a JSON object, got {type(item).__name__}",
                    where=location(path, row),
                    hint="a .json file must hold a list of objects",
                )
        return list(enumerate(data, start=1))
    if suffix == ".csv":
        text = _read_utf8(path)
        reader = csv.DictReader(io.StringIO(text, newline=""))
        _check_separator(reader.fieldnames or [], path)
        return list(enumerate(reader, start=1))
    if suffix == ".parquet":
        _require_file(path)
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
        if not rows:
            raise RlcwError("file is empty", where=str(path), hint="expected at least one record")
        return list(enumerate(rows, start=1))
    raise RlcwError(f"unsupported file type '{suffix}'", where=str(path), hint=suffix_hint(suffix))


def suffix_hint(suffix: str) -> str:
    """What to do with a file `read_table` does not read (a spreadsheet's tab-separated export named)."""
    if suffix.lower() in (".tsv", ".tab"):
        return "a tab-separated file: save it as CSV (comma-separated) or convert it to .jsonl"
    return f"use one of {', '.join(TABLE_SUFFIXES)}"


def _check_separator(header: list[str], path: Path) -> None:
    """A header read as one column that holds semicolons: a CSV saved with `;` (European spreadsheet locales)."""
    if len(header) == 1 and header[0].count(";") >= 1:
        raise RlcwError(
            f"the header is one column '{header[0][:60]}': the file looks separated by ';', not ','",
            where=location(path, 1),
            hint="save it with ',' as the separator (CSV UTF-8, comma delimited), or convert it to .jsonl",
        )


def check_unique(rows: Iterable[tuple[int, Any]], path: str | Path, what: str = "id") -> None:
    """An error naming both lines when two `(line, key)` rows share a key (id-keyed joins would pair the wrong
    rows); keys that are None are skipped."""
    seen: dict[Any, int] = {}
    for line, key in rows:
        if key is None:
            continue
        if key in seen:
            raise RlcwError(
                f"duplicate {what} {key!r}: also on line {seen[key]}",
                where=location(path, line, what),
                hint=f"give every row its own {what} (joins by {what} would pair the wrong rows)",
            )
        seen[key] = line
