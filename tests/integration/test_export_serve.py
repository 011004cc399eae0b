"""Export the embedded model with `rlcw export`, serve it with `transformers serve` on 127.0.0.1,
and answer a chat request through the OpenAI client (what a user of the exported model does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from test_serve_rm import free_port

from rlcw.config import load_config


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    from rlcw.recipes.export import ExportConfig, main

    root = tmp_path_factory.mktemp("export")
    cfg = load_config(
        ExportConfig,
        None,
        [
            f"output_dir={root}",
            "run_name=export",
            "model.name=smollm2-135m-instruct",
            "generation.max_new_tokens=32",
            "generation.temperature=0.7",
        ],
    )
    out = main(cfg)
    return Path(out["artifacts"]["model"])


def test_export_has_serving_files(exported):
    assert (exported / "model.safetensors").is_file()
    assert "<|im_start|>" in (exported / "chat_template.jinja").read_text()
    gen = json.loads((exported / "generation_config.json").read_text())
    assert gen["do_sample"] is True and gen["temperature"] == 0.7 and gen["max_new_tokens"] == 32
    card = (exported / "README.md").read_text()
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card and "Apache-2.0" in card


def test_transformers_serve_answers_openai_chat(exported, tmp_path):
    from openai import OpenAI

    port = free_port()
    (Path.home() / ".cache" / "huggingface" / "hub").mkdir(parents=True, exist_ok=True)  # /v1/models needs it
    serve = Path(sys.executable).with_name("transformers")
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [str(serve), "serve", str(exported), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 180
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            pytest.fail("transformers serve not healthy in 180 s:\n" + (tmp_path / "serve.log").read_text()[-3000:])
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300)
        start = time.time()
        reply = client.chat.completions.create(
            model=str(exported),
            max_tokens=24,
            temperature=0.7,
            messages=[
                {"role": "system", "content": "You are a skilled fiction writer."},
                {"role": "user", "content": "Write one sentence about a lighthouse keeper."},
            ],
        )
        text = reply.choices[0].message.content
        print(
            f"\ntransformers serve: {reply.usage.completion_tokens if reply.usage else '?'} tokens in {time.time() - start:.1f} s: {text!r}"
        )
        assert isinstance(text, str) and len(text.split()) >= 3
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
