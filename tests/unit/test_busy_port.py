"""serve-rm on a port another server holds: an error naming the port and the fix, exit 2, no run folder."""

from __future__ import annotations

import socket

import pytest

from rlcw import cli


def test_serve_rm_on_a_busy_port_names_the_port_and_writes_nothing(tmp_path, capsys):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(SystemExit) as e:
            cli.main(["serve-rm", f"output_dir={tmp_path}", "rm_path=nowhere", f"port={port}"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"rlcw: error: port: cannot listen on 127.0.0.1:{port}" in err
    assert f"pass another port (e.g. port={port + 1}) or stop that server" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "override, message",
    [
        ("port=70000", "port: port must be 0-65535, got 70000"),
        ("token_env=RLCW_TEST_UNSET_TOKEN", "token_env=RLCW_TEST_UNSET_TOKEN but that environment variable is empty"),
    ],
)
def test_serve_rm_with_a_port_out_of_range_or_an_unset_token_writes_nothing(override, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["serve-rm", f"output_dir={tmp_path}", "rm_path=nowhere", "port=0", override])
    out = capsys.readouterr()
    assert e.value.code == 2
    assert message in out.err
    assert not list(tmp_path.iterdir()) and "removed" not in out.out  # refused before a run folder was made
