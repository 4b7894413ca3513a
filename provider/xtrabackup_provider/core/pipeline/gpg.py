"""GPG stages: a private, temporary GNUPGHOME per run; keys imported there and wiped afterwards.

Backup hosts only ever import public keys. A restore imports the private key, and its
passphrase reaches gpg through an inherited pipe (--passphrase-fd), never argv or env.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..common import children
from ..common.tempdirs import private_dir

GPG = "gpg"


class GpgError(RuntimeError):
    """A key could not be imported or used; the message says which and what to do."""


class PassphraseRequired(GpgError):
    """The private key is protected by a passphrase and none was given."""


def _run_gpg(home: Path, args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    argv = [GPG, "--homedir", str(home), "--batch", "--no-tty", *args]
    return children.run(argv, input=stdin, capture_output=True, timeout=120)


def _raise_if_killed(
    proc: subprocess.CompletedProcess[bytes], what: str, nothing_yet: str = "nothing was downloaded yet"
) -> None:
    """A gpg killed by a signal (the OOM killer, a kill -9) says nothing of the key or the
    passphrase: name that, not a wrong passphrase or an unusable key."""
    if proc.returncode < 0:
        raise GpgError(
            f"gpg {what} failed ({children.how_ended(proc.returncode)}): {_tail(proc.stderr)}; "
            f"{nothing_yet}, run it again"
        )


# gpg-agent's lowest S2K iteration count (its default is calibrated to ~100 ms of hashing).
AGENT_S2K_COUNT = 65536


class GpgHome:
    """A throwaway GNUPGHOME. Use as a context manager; `close()` kills its agent and wipes it."""

    def __init__(self) -> None:
        # /tmp keeps the agent's socket path short (gpg refuses sockets past ~100 bytes).
        self.path = private_dir("gpg", "/tmp", on_sweep=_kill_agent)
        os.chmod(self.path, 0o700)
        self.passphrase: str | None = None

    def __enter__(self) -> GpgHome:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        _kill_agent(self.path)
        shutil.rmtree(self.path, ignore_errors=True)

    def import_keys(self, armored: str, what: str = "key") -> list[str]:
        """Import armored key material; return the fingerprints of the primary keys it holds."""
        if "-----BEGIN PGP" not in armored:
            raise GpgError(
                f"{what}: not an ASCII-armored OpenPGP key (expected '-----BEGIN PGP ... KEY BLOCK-----')"
            )
        before = set(self.fingerprints())
        proc = _run_gpg(self.path, ["--import"], armored.encode())
        if proc.returncode != 0:
            raise GpgError(f"{what}: gpg could not import it: {_tail(proc.stderr)}")
        imported = [f for f in self.fingerprints() if f not in before]
        return imported or list(before & set(self.fingerprints()))

    def fingerprints(self, secret: bool = False) -> list[str]:
        listing = "--list-secret-keys" if secret else "--list-keys"
        proc = _run_gpg(self.path, ["--with-colons", "--fixed-list-mode", listing])
        fprs: list[str] = []
        expect_fpr = False
        for line in proc.stdout.decode(errors="replace").splitlines():
            fields = line.split(":")
            if fields[0] in ("pub", "sec"):
                expect_fpr = True
            elif fields[0] == "fpr" and expect_fpr:
                fprs.append(fields[9])
                expect_fpr = False
        return fprs

    def import_private_key(self, armored: str, passphrase: str | None) -> list[str]:
        if "PRIVATE KEY BLOCK" not in armored:
            raise GpgError("private key: expected an armored '-----BEGIN PGP PRIVATE KEY BLOCK-----'")
        _cheap_agent_protection(self.path)
        fprs = self.import_keys(armored, "private key")
        self.passphrase = passphrase
        self._check_unlocks(fprs)
        return fprs

    def _check_unlocks(self, fprs: list[str]) -> None:
        """Decrypt a probe now: a wrong passphrase is named as such before anything is downloaded
        (gpg itself would only say "No secret key" halfway through the stream)."""
        probe = _run_gpg(
            self.path,
            ["--trust-model", "always", "--encrypt", *[a for f in fprs for a in ("-r", f)], "--output", "-"],
            b"probe",
        )
        _raise_if_killed(probe, "--encrypt of the passphrase probe")
        if probe.returncode != 0:
            raise GpgError(
                f"private key {', '.join(fprs)} has no usable encryption key: {_tail(probe.stderr)}"
            )
        fd = passphrase_pipe(self.passphrase) if self.passphrase is not None else None
        try:
            proc = children.run(
                self.decrypt_argv(fd),
                input=probe.stdout,
                capture_output=True,
                pass_fds=(fd,) if fd is not None else (),
                timeout=120,
            )
        finally:
            if fd is not None:
                os.close(fd)
        _raise_if_killed(proc, "--decrypt of the passphrase probe")
        if (proc.returncode != 0 or proc.stdout != b"probe") and self.passphrase is None:
            raise PassphraseRequired(
                f"private key {', '.join(fprs)} is protected by a passphrase and none was given"
            )
        if proc.returncode != 0 or proc.stdout != b"probe":
            raise GpgError(
                f"the passphrase given does not unlock private key {', '.join(fprs)} ({_tail(proc.stderr)}); "
                "check the passphrase (the gpg connection's password, or the CLI's passphrase variable)"
            )

    def encrypt_argv(self, recipients: list[str]) -> list[str]:
        if not recipients:
            raise GpgError("encryption needs at least one recipient fingerprint")
        argv = [GPG, "--homedir", str(self.path), "--batch", "--no-tty", "--quiet", "--trust-model", "always"]
        # The stream is already zstd-compressed; gpg's own compression would only burn CPU.
        argv += ["--compress-algo", "none", "--encrypt"]
        for fpr in recipients:
            argv += ["--recipient", fpr]
        return argv + ["--output", "-"]

    def decrypt_argv(self, passphrase_fd: int | None) -> list[str]:
        argv = [GPG, "--homedir", str(self.path), "--batch", "--no-tty", "--quiet"]
        if passphrase_fd is not None:
            argv += ["--pinentry-mode", "loopback", "--passphrase-fd", str(passphrase_fd)]
        return argv + ["--decrypt"]

    def check_recipients_usable(self, recipients: list[str]) -> None:
        """Fail before any backup starts if a recipient key is expired, revoked or unknown."""
        proc = _run_gpg(
            self.path,
            [
                "--trust-model",
                "always",
                "--encrypt",
                *[a for f in recipients for a in ("-r", f)],
                "--output",
                "-",
            ],
            b"probe",
        )
        _raise_if_killed(proc, "--encrypt of the recipient check", "nothing was stored yet")
        if proc.returncode != 0:
            raise GpgError(f"recipient key unusable ({', '.join(recipients)}): {_tail(proc.stderr)}")


def _kill_agent(home: Path) -> None:
    """The agent of a killed run's GPG home would live on with it; stop it before the home goes."""
    children.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False)


def passphrase_pipe(passphrase: str) -> int:
    """A pipe read-end holding the passphrase, to hand to gpg as --passphrase-fd."""
    read_fd, write_fd = os.pipe()
    os.write(write_fd, passphrase.encode() + b"\n")
    os.close(write_fd)
    return read_fd


def _tail(stderr: bytes) -> str:
    return children.summarize_stderr(stderr, 600) or "(no output)"


@dataclass(frozen=True)
class KeyPair:
    public_key: str  # ASCII-armored
    private_key: str = field(repr=False)  # ASCII-armored, protected by the passphrase
    fingerprint: str = ""


def generate_key_pair(uid: str, passphrase: str) -> KeyPair:
    """A new ed25519 (sign) + cv25519 (encrypt) key pair; the passphrase goes to gpg on stdin."""
    with GpgHome() as home:
        secret = ["--pinentry-mode", "loopback", "--passphrase-fd", "0"]
        stdin = passphrase.encode()
        proc = _run_gpg(
            home.path, [*secret, "--quick-gen-key", uid, "future-default", "default", "never"], stdin
        )
        if proc.returncode != 0:
            raise GpgError(f"gpg could not generate a key for {uid!r}: {_tail(proc.stderr)}")
        fingerprint = home.fingerprints(secret=True)[0]
        public = _run_gpg(home.path, ["--armor", "--export", fingerprint]).stdout.decode()
        private = _run_gpg(
            home.path, [*secret, "--armor", "--export-secret-keys", fingerprint], stdin
        ).stdout.decode()
    return KeyPair(public, private, fingerprint)


def _cheap_agent_protection(home: Path) -> None:
    """Have this throwaway home's agent store the private key it imports under the minimum S2K count.

    The agent keeps the passphrase, not the unlocked key: it re-derives the key from the passphrase
    for every decryption, i.e. once per object (a restore's backups, a PITR's binlog segments).
    With the calibrated count that cost 0.3 s of agent CPU per object on a 2-core worker (2.6 s
    for a full + 6 incrementals, serialised in the agent). The weaker protection only covers this
    copy of the key, in a 0700 directory that lives for one run and is wiped afterwards; whoever
    can read that directory can also read the passphrase it was given (the agent's cache, the
    connection), and the key material supplied keeps its own protection. Only for imports: the
    agent also protects keys it exports with this count, so keygen's homes must not have it.

    auto-expand-secmem: a chain restore decrypts its backups side by side through this one agent,
    and an agent out of secure memory fails a decryption with gpg's "No secret key" (gpg-agent(1));
    CI saw that once on a loaded run."""
    (home / "gpg-agent.conf").write_text(f"s2k-count {AGENT_S2K_COUNT}\nauto-expand-secmem\n")
    _kill_agent(home)  # an agent already running would not read it
