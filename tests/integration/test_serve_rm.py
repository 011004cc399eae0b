"""`rlcw serve-rm`: a real uvicorn server on 127.0.0.1 with a tiny RM, called by RemoteReward.

Shows that concurrent requests are merged into one scorer call (the server's /health batch
statistics), that bad requests get 4xx and the server keeps answering, and that a server that
is down gives a clear error after the retries, never a reward.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from rlcw.errors import RlcwError
from rlcw.rewards.remote import RemoteReward

TOKEN_ENV = "RLCW_TEST_RM_TOKEN"
TOKEN = "test-token-123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tiny_rm(model_dir: Path, out: Path) -> Path:
    """A tiny random sequence-classification RM folder (model, RM tokenizer, rlcw_rm.json)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    from rlcw.models import load_tokenizer
    from rlcw.rm.render import RMSpec, save_spec

    torch.manual_seed(0)
    tok = load_tokenizer(str(model_dir), for_reward_model=True, padding_side="right")
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1)
    model.config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out)
    tok.save_pretrained(out)
    save_spec(RMSpec(type="bt", base_model=str(model_dir), input_template="plain", max_length=64), out)
    return out


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_rm")
    rm = make_tiny_rm(tiny_model_dir, root / "rm")
    port = free_port()
    env = {**os.environ, TOKEN_ENV: TOKEN, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "rlcw",
        "serve-rm",
        f"rm_path={rm}",
        f"port={port}",
        f"token_env={TOKEN_ENV}",
        "max_batch=64",
        "max_wait_ms=300",
        "max_request_items=8",
        "max_chars=2000",
        f"output_dir={root}",
        "run_name=srv",
    ]
    log = (root / "server.log").open("w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail("serve-rm exited early:\n" + (root / "server.log").read_text())
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("serve-rm did not become healthy in 120 s:\n" + (root / "server.log").read_text())
    yield {"url": url, "rm": rm, "root": root, "proc": proc}
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


def _healthy(url: str, proc, log_path, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail("serve-rm exited early:\n" + log_path.read_text())
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.3)
    proc.kill()
    pytest.fail(f"serve-rm did not become healthy in {seconds:.0f} s:\n" + log_path.read_text())


def _auth() -> dict:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_concurrent_requests_are_batched_and_match_direct_scoring(server, monkeypatch):
    from rlcw.rm.scoring import load_rm

    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    prompts = [f"Write about object number {i}." for i in range(12)]
    stories = [("The lamp glowed. " * (i + 1)).strip() for i in range(12)]
    before = httpx.get(f"{server['url']}/health").json()
    reward = RemoteReward([server["url"]], token_env=TOKEN_ENV, timeout_s=60, max_retries=1)
    with ThreadPoolExecutor(6) as pool:  # 6 clients at once, 2 items each
        parts = list(pool.map(lambda i: reward(prompts[i : i + 2], stories[i : i + 2]), range(0, 12, 2)))
    got = [r for part in parts for r in part]
    after = httpx.get(f"{server['url']}/health").json()
    assert after["requests"] - before["requests"] == 6
    assert after["largest_batch_requests"] > 1, after  # several requests went into one scorer call
    assert after["batches"] - before["batches"] < 6, after
    direct = load_rm(server["rm"]).score(prompts, stories)
    assert got == pytest.approx(direct, abs=1e-4)
    assert len(set(round(g, 6) for g in got)) > 1  # not a constant


@pytest.mark.parametrize(
    "kwargs, status, words",
    [
        ({"content": b"{not json"}, 400, "not valid JSON"),
        ({"json": {"prompts": ["a", "b"], "completions": ["c"]}}, 422, "has 2 items"),
        ({"json": {"prompts": "a", "completions": "b"}}, 422, "list of strings"),
        ({"json": {"prompts": ["p"] * 9, "completions": ["c"] * 9}}, 413, "max_request_items=8"),
        ({"json": {"prompts": ["p"], "completions": ["x" * 2001]}}, 413, "max_chars=2000"),
        ({"content": b"x" * 200_000}, 413, "too large"),
    ],
)
def test_bad_requests_get_4xx_and_the_server_survives(server, kwargs, status, words):
    resp = httpx.post(f"{server['url']}/score", headers=_auth(), timeout=30, **kwargs)
    assert resp.status_code == status, resp.text
    assert words in (resp.json()["error"] + " " + str(resp.json()["detail"]))
    ok = httpx.post(
        f"{server['url']}/score", headers=_auth(), json={"prompts": ["p"], "completions": ["a story"]}, timeout=30
    )
    assert ok.status_code == 200 and len(ok.json()["rewards"]) == 1


def test_token_is_required(server):
    resp = httpx.post(f"{server['url']}/score", json={"prompts": ["p"], "completions": ["c"]}, timeout=30)
    assert resp.status_code == 401
    wrong = httpx.post(
        f"{server['url']}/score",
        headers={"Authorization": "Bearer nope"},
        json={"prompts": ["p"], "completions": ["c"]},
        timeout=30,
    )
    assert wrong.status_code == 401


def test_openapi_describes_score(server):
    spec = httpx.get(f"{server['url']}/openapi.json", timeout=30).json()
    assert "/score" in spec["paths"] and "/health" in spec["paths"]
    body = spec["paths"]["/score"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["required"]) == {"prompts", "completions"}


def test_server_down_raises_clear_error_after_retries():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens here
    reward = RemoteReward([url], max_retries=2, timeout_s=2, backoff_s=0.05)
    start = time.time()
    with pytest.raises(RlcwError) as info:
        reward(["p"], ["story"])
    msg = str(info.value)
    assert "failed 3 time(s)" in msg and "no reward was produced" in msg and url in msg
    assert time.time() - start < 10


def test_stopped_server_keeps_stats_in_summary_and_restarts_in_the_same_folder(server):
    """Runs last (file order): stops the module's server. A clean stop writes its batch statistics to
    summary.json and no metrics rows, so the same command restarts in the same run folder (no overwrite=true)."""
    proc, root = server["proc"], server["root"]
    proc.terminate()
    assert proc.wait(timeout=60) == 0
    summary = json.loads((root / "srv" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["metrics"]["requests"] >= 1
    assert not (root / "srv" / "metrics.jsonl").exists()
    port = free_port()
    cmd = [sys.executable, "-m", "rlcw", "serve-rm", f"rm_path={server['rm']}", f"port={port}"]
    cmd += [f"token_env={TOKEN_ENV}", f"output_dir={root}", "run_name=srv"]
    env = {**os.environ, TOKEN_ENV: TOKEN, "OMP_NUM_THREADS": "1"}
    log_path = root / "server2.log"
    with log_path.open("w") as log:
        again = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            _healthy(f"http://127.0.0.1:{port}", again, log_path)
        finally:
            again.terminate()
            again.wait(timeout=60)
