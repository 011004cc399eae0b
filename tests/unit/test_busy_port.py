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
