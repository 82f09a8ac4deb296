"""A real OpenSSH server on a loopback address, started and stopped by the tests.

Each server lives in its own temporary directory: its own ``sshd_config``, a throwaway
ed25519 host key, a throwaway user key pair (the public half in its own authorized_keys
file), a ``known_hosts`` file that trusts exactly this server, and its log. It listens on a
random free port of ``host`` (127.0.0.1 by default; any 127.x.y.z works on Linux without
set-up, so several servers can stand for several machines) and lets the current user log
in with the user key only. Nothing system-wide is created, with one exception: sshd refuses
to start as root without its privilege-separation directory ``/run/sshd``, which is created
(empty, as the Debian service does) when missing.

The fixtures publish an Airflow SSH connection for each server as ``AIRFLOW_CONN_<ID>`` (JSON)
in the environment for the duration of the test, with ``key_file``, ``host_key`` and
``look_for_keys: false`` in its extra, so ``SSHHook(ssh_conn_id=server.conn_id)`` works.

Fixtures: ``sshd`` (one server on 127.0.0.1) and ``sshd_factory`` (call it as
``sshd_factory(host="127.0.0.2", conn_id="node2")`` for more). Both stop their servers at
the end of the test. ``SshdServer.drop_connections()`` kills the per-connection sshd
processes (a network drop as the client sees it), ``stop()``/``start()``/``restart()`` take
the listener down and up again on the same port with the same host key.
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.proc_helpers import children_of
from tests.support.system_parts import require_part

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
PRIVSEP_DIR = Path("/run/sshd")
START_TIMEOUT_S = 15.0


def free_port(host: str) -> int:
    """A TCP port that is free on ``host`` right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True,
    )


def _root_account_locked() -> bool:
    """True when root's password field is locked ('!'): sshd then needs PAM to allow keys."""
    try:
        for line in Path("/etc/shadow").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == "root":
                return rest.startswith("!")
    except OSError:
        pass
    return False


@dataclass
class SshdServer:
    """One sshd process and everything a client needs to reach it."""

    host: str
    port: int
    user: str
    directory: Path
    conn_id: str
    process: subprocess.Popen | None = field(default=None, repr=False)
    #: more sshd_config lines (e.g. ``SetEnv PATH=…`` to put a stand-in ``docker`` first)
    extra_config: tuple[str, ...] = ()

    # -- paths -----------------------------------------------------------------------
    @property
    def host_key_path(self) -> Path:
        return self.directory / "ssh_host_ed25519_key"

    @property
    def user_key_path(self) -> Path:
        return self.directory / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.directory / "known_hosts"

    @property
    def config_path(self) -> Path:
        return self.directory / "sshd_config"

    @property
    def log_path(self) -> Path:
        return self.directory / "sshd.log"

    @property
    def host_key_line(self) -> str:
        """The public host key as ``<type> <base64>`` (the form of the ``host_key`` extra)."""
        key_type, key_data, *_ = (self.directory / "ssh_host_ed25519_key.pub").read_text().split()
        return f"{key_type} {key_data}"

    @property
    def known_hosts_name(self) -> str:
        """How known_hosts names this server: ``[host]:port`` for any port but 22."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    # -- set-up ----------------------------------------------------------------------
    def write_files(self) -> None:
        """Keys, authorized_keys, known_hosts and sshd_config (keys only if missing)."""
        if not self.host_key_path.exists():
            _keygen(self.host_key_path, f"gpucompare-test-host-{self.host}")
        if not self.user_key_path.exists():
            _keygen(self.user_key_path, f"gpucompare-test-user-{self.user}")
        (self.directory / "authorized_keys").write_text(
            (self.directory / "id_ed25519.pub").read_text()
        )
        self.known_hosts_path.write_text(f"{self.known_hosts_name} {self.host_key_line}\n")
        use_pam = "yes" if os.geteuid() == 0 and _root_account_locked() else "no"
        self.config_path.write_text(
            "\n".join([
                f"ListenAddress {self.host}:{self.port}",
                f"HostKey {self.host_key_path}",
                f"PidFile {self.directory / 'sshd.pid'}",
                f"AuthorizedKeysFile {self.directory / 'authorized_keys'}",
                f"AllowUsers {self.user}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                f"UsePAM {use_pam}",
                # The key files live in a world-readable tmp dir; the test does not care.
                "StrictModes no",
                "Subsystem sftp internal-sftp",
                "PrintMotd no",
                "MaxStartups 64",
                "MaxSessions 64",
                "ClientAliveInterval 0",
                "LogLevel VERBOSE",
                *self.extra_config,
                "",
            ])
        )

    def airflow_connection(self) -> dict:
        """The Airflow SSH connection for this server, as the JSON form of AIRFLOW_CONN_<ID>."""
        return {
            "conn_type": "ssh",
            "host": self.host,
            "port": self.port,
            "login": self.user,
            "extra": {
                "key_file": str(self.user_key_path),
                "host_key": self.host_key_line,
                "look_for_keys": "false",
                "conn_timeout": "10",
            },
        }

    @property
    def conn_env_var(self) -> str:
        return f"AIRFLOW_CONN_{self.conn_id.upper()}"

    def connection_json(self, extra: dict | None = None, *, drop: tuple[str, ...] = ()) -> str:
        """The connection as the JSON value of an ``AIRFLOW_CONN_<ID>`` variable.

        ``extra`` entries are merged into the connection's extra and names in ``drop`` are
        removed from it (e.g. ``drop=("host_key",)`` for a connection that trusts no key).
        Publish it with ``monkeypatch.setenv`` so the test restores the environment.
        """
        conn = self.airflow_connection()
        conn["extra"].update(extra or {})
        for name in drop:
            conn["extra"].pop(name, None)
        return json.dumps(conn)

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> None:
        """Start the listener (same port, same keys) and wait until it sends its banner."""
        if self.running:
            return
        if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.process = subprocess.Popen(
            [str(SSHD), "-D", "-f", str(self.config_path), "-E", str(self.log_path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        self._wait_until_listening(log_offset)

    def _wait_until_listening(self, log_offset: int) -> None:
        """Until this sshd logs that it listens and answers with a banner.

        The log line proves the port is ours: another process may have taken the free port
        in the meantime (and might even be another test's sshd, with a banner of its own).
        """
        listening = f"Server listening on {self.host} port {self.port}."
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            log = self._log_since(log_offset)
            if self.process is not None and self.process.poll() is not None:
                err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                raise RuntimeError(f"sshd exited with {self.process.returncode}: {err}{log[-2000:]}")
            if listening in log:
                try:
                    with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
                        if sock.recv(64).startswith(b"SSH-"):
                            return
                except OSError:
                    pass
            time.sleep(0.05)
        raise RuntimeError(f"sshd on {self.host}:{self.port} did not come up in {START_TIMEOUT_S}s")

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes: the listener's children."""
        if self.process is None:
            return []
        return children_of(self.process.pid)

    def drop_connections(self) -> int:
        """Kill every open connection (its sshd processes), leaving the listener up.

        Programs started through a connection keep running if they detached (setsid/nohup);
        the client sees its TCP connection closed, as on a network failure. Returns how many
        per-connection processes were killed.
        """
        pids = self.session_pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(pids)

    def stop(self) -> None:
        """Stop the listener and drop every connection. Safe twice.

        The listener is paused first: a connection it accepted between the drop and its exit
        would outlive it (its sshd process is its own), and a client reconnecting at that moment
        would find the host still up. Paused, it accepts none, and it exits refusing them."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGSTOP)
        self.drop_connections()
        if self.process.poll() is None:
            self.process.terminate()
            self.process.send_signal(signal.SIGCONT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.process.stderr:
            self.process.stderr.close()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()



def start_sshd(directory: Path, *, host: str = "127.0.0.1", conn_id: str = "gpucompare_test_ssh",
               user: str | None = None, extra_config: tuple[str, ...] = ()) -> SshdServer:
    """Create the files of a server in ``directory`` and start it.

    Its Airflow connection is not published: set ``server.conn_env_var`` to
    ``server.connection_json()`` (the fixtures do, with monkeypatch).
    """
    if not SSHD.exists():
        raise RuntimeError(f"{SSHD} is missing: run scripts/install-system-deps.sh")
    directory.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for _attempt in range(5):  # another process may take the free port before sshd does
        server = SshdServer(host=host, port=free_port(host), user=user or getpass.getuser(),
                            directory=directory, conn_id=conn_id, extra_config=extra_config)
        server.write_files()
        try:
            server.start()
        except RuntimeError as exc:
            last_error = exc
            server.stop()
            continue
        return server
    raise RuntimeError(f"could not start sshd on {host}: {last_error}")


SshdFactory = Callable[..., SshdServer]


@pytest.fixture
def sshd_factory(tmp_path_factory: pytest.TempPathFactory,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[SshdFactory]:
    """Start sshd servers on demand: ``sshd_factory(host="127.0.0.2", conn_id="node2")``."""
    servers: list[SshdServer] = []

    def make(host: str = "127.0.0.1", conn_id: str | None = None,
             extra_config: tuple[str, ...] = ()) -> SshdServer:
        require_part("OpenSSH server (/usr/sbin/sshd)", SSHD.exists())
        conn_id = conn_id or f"gpucompare_test_ssh_{len(servers)}"
        directory = tmp_path_factory.mktemp(f"sshd-{host}-")
        server = start_sshd(directory, host=host, conn_id=conn_id, extra_config=extra_config)
        servers.append(server)
        monkeypatch.setenv(server.conn_env_var, server.connection_json())
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def sshd(sshd_factory: SshdFactory) -> SshdServer:
    """One sshd on 127.0.0.1 with its Airflow connection ``gpucompare_test_ssh``."""
    return sshd_factory(conn_id="gpucompare_test_ssh")
