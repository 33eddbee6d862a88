"""The node under conf/disque.service's layout and sandbox: what the unit
and its install steps (the comment at its top) give it must be enough for
CONFIG REWRITE, so that ACL SETUSER, CONFIG SET protected-mode and the
controlled restart of docs/persistence.md can be saved.

The layout is built from the unit file itself in a directory that stands
for ``/``: the install steps' venv, directories and file modes (the
``disque`` user becomes an unprivileged uid), and the unit's StateDirectory,
LogsDirectory, RuntimeDirectory and ReadWritePaths. The node runs as that
uid in a mount namespace of the test's own where every mount is read-only
but those paths (as ProtectSystem=strict does), with the unit's UMask and
NoNewPrivileges. The node is the unit's ExecStart, in that venv: the
clone's package and what it requires are installed there, so the node's
uid reaches them wherever the clone sits (a 0700 home, a ``mktemp -d``).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shlex
import shutil
import stat
import subprocess
import sysconfig
import tempfile
import tomllib
import venv
from pathlib import Path

import pytest
import redis
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.process import REPO, DisqueProcess, wait_until

UNIT = REPO / "conf" / "disque.service"
SHIPPED_CONFIG = REPO / "conf" / "disque.conf"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
NODE_UID = NODE_GID = 64_711  # stands for the disque user: no file of the machine is its

# Inside the namespace, as root: the unit's writable paths stay writable
# (bound onto themselves, so they are mounts of their own), every other
# mount but the API file systems becomes read-only, then the node starts
# as the unprivileged user.
SANDBOX = r'''
set -e
writable="$1"; shift
for path in $writable; do mount --bind "$path" "$path"; done
for mnt in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
    case "$mnt" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
    case " $writable " in *" $mnt "*) continue ;; esac
    mount -o remount,bind,ro "$mnt"
done
umask "$UNIT_UMASK"
exec setpriv --reuid "$NODE_UID" --regid "$NODE_GID" --clear-groups --no-new-privs \
    --inh-caps=-all --bounding-set=-all -- "$@"
'''


def unit_settings() -> dict[str, list[str]]:
    """The [Service] settings of the unit, each name with its values."""
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings.setdefault(name.strip(), []).append(value.strip())
    return settings


def install_steps() -> list[list[str]]:
    """The ``install`` commands of the unit's install steps."""
    return [shlex.split(line.lstrip("# "))
            for line in UNIT.read_text().splitlines()
            if re.match(r"#\s+install\s", line)]


def venv_step() -> str:
    """The directory of the install steps' ``python3 -m venv <dir> && <dir>/bin/pip install .``."""
    found = re.search(r"^#\s+\S+ -m venv (\S+) && \1/bin/pip install \.$", UNIT.read_text(), re.M)
    assert found, "the unit's install steps make no venv for the package"
    return found.group(1)


def required_distributions() -> list[importlib.metadata.Distribution]:
    """The distributions ``pip install .`` brings beside the package: its
    dependencies and theirs (no extras), as the tests' environment has them."""
    pending = [Requirement(spec) for spec in PROJECT["dependencies"]]
    found: dict[str, importlib.metadata.Distribution] = {}
    while pending:
        requirement = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        distribution = importlib.metadata.distribution(requirement.name)
        name = canonicalize_name(distribution.metadata["Name"])
        if name not in found:
            found[name] = distribution
            pending.extend(Requirement(spec) for spec in distribution.requires or ())
    return list(found.values())


def place(source: Path, target: Path) -> None:
    """Give ``target`` the content of ``source``, readable by every user: a hard
    link where ``source`` already is and the file system allows, else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        if os.stat(source).st_mode & stat.S_IROTH:
            os.link(source, target)
            return
    except OSError:  # another file system
        pass
    shutil.copy2(source, target)
    os.chmod(target, os.stat(target).st_mode | 0o444)


def node_can_read(path: Path) -> bool:
    """Whether the node's uid can enter every directory down to ``path`` and read it."""
    return subprocess.run(["setpriv", "--reuid", str(NODE_UID), "--regid", str(NODE_GID),
                           "--clear-groups", "--", "test", "-r", str(path)]).returncode == 0


class Layout:
    """A tree that stands for the machine's ``/`` after the install steps."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.writable: list[Path] = []
        self.config: Path | None = None

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    @staticmethod
    def owner(name: str) -> int:
        return 0 if name == "root" else NODE_UID

    def install(self, argv: list[str]) -> None:
        """Do what one ``install`` step does, as the disque user would see it."""
        directory = create_parents = False
        mode, user, group, paths = 0o755, "root", "root", []
        args = iter(argv[1:])
        for arg in args:
            if arg == "-d":
                directory = True
            elif arg == "-D":
                create_parents = True
            elif arg == "-m":
                mode = int(next(args), 8)
            elif arg == "-o":
                user = next(args)
            elif arg == "-g":
                group = next(args)
            else:
                paths.append(arg)
        target = self.path(paths[-1])
        if directory:
            target.mkdir(parents=True, exist_ok=True)
        else:
            if paths[0] != "conf/disque.conf":
                return  # only the config file matters to the node
            if not target.parent.is_dir():
                assert create_parents, "install into a missing directory: %s" % argv
                target.parent.mkdir(parents=True)
            self.config = target
            target.write_text("")  # DisqueProcess writes its content
        os.chown(target, self.owner(user), self.owner(group))
        os.chmod(target, mode)

    def install_package(self, directory: str) -> None:
        """Do what the venv step does, from the tests' environment: a venv on
        the interpreter running the tests, with this clone's package, the
        distributions it requires and its console scripts."""
        target = self.path(directory)
        venv.create(target, symlinks=True)
        python = target / "bin" / "python"
        site = Path(subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True, capture_output=True, text=True).stdout.strip())
        for distribution in required_distributions():
            assert distribution.files is not None, "no RECORD: %s" % distribution.metadata["Name"]
            for file in distribution.files:
                if file.parts[0] != "..":  # its own scripts, which the node does not run
                    place(distribution.locate_file(file), site / file)
        package = [path for path in (REPO / "disque").rglob("*")
                   if path.is_file() and "__pycache__" not in path.parts]
        # The compiled core's shared library, if it is built in place.
        package.extend(REPO.glob("*__mypyc.*.so"))
        for path in package:
            place(path, site / path.relative_to(REPO))
        for name, entry_point in PROJECT["scripts"].items():
            module, function = entry_point.split(":")
            script = target / "bin" / name
            script.write_text("#!%s\nimport sys\nfrom %s import %s\nsys.exit(%s())\n"
                              % (python, module, function, function))
            script.chmod(0o755)

    def service_directory(self, base: str, name: str, mode: str = "0755") -> None:
        """What systemd makes of StateDirectory= and its kin: owned by User=."""
        path = self.path(base + "/" + name)
        path.mkdir(parents=True)
        os.chown(path, NODE_UID, NODE_GID)
        os.chmod(path, int(mode, 8))
        self.writable.append(path)


def sandbox_unavailable() -> str | None:
    """Why this machine cannot run the sandbox, or None."""
    if os.geteuid() != 0:
        return "needs root: it makes a mount namespace and runs the node as another uid"
    missing = [tool for tool in ("unshare", "setpriv", "mount") if shutil.which(tool) is None]
    if missing:
        return "needs util-linux's %s" % ", ".join(missing)
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot make a mount namespace here: %s" % probe.stderr.strip()
    return None


@pytest.fixture
def layout():
    reason = sandbox_unavailable()
    if reason:
        pytest.skip(reason)
    # Not pytest's tmp_path: its parents are private to root, and the node's
    # uid must reach its files. TMPDIR may be private too (pam_tmpdir's is).
    parent = next((Path(p) for p in (tempfile.gettempdir(), "/tmp") if node_can_read(Path(p))),
                  None)
    if parent is None:
        pytest.skip("the node's uid cannot enter %s or /tmp to reach the layout"
                    % tempfile.gettempdir())
    root = Path(tempfile.mkdtemp(prefix="disque-systemd-", dir=parent))
    os.chmod(root, 0o755)
    try:
        tree = Layout(root)
        build(tree)
        yield tree
    finally:
        shutil.rmtree(root, ignore_errors=True)


def build(tree: Layout) -> None:
    """Make what the install steps and systemd make, with the modes they give
    under the usual umask (022) whatever this process's is."""
    previous_umask = os.umask(0o022)
    try:
        settings = unit_settings()
        venv_directory = venv_step()
        tree.install_package(venv_directory)
        interpreter = (tree.path(venv_directory) / "bin" / "python").resolve()
        for needed in (interpreter, Path(sysconfig.get_path("stdlib"))):
            if not node_can_read(needed):
                pytest.skip("the node's uid cannot reach %s, of the interpreter running the"
                            " tests (%s): a service needs one every user can run, like the"
                            " install steps' /usr/bin/python3" % (needed, interpreter))
        for step in install_steps():
            tree.install(step)
        assert tree.config is not None, "the unit's install steps install no config file"
        for setting, base in (("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log"),
                              ("RuntimeDirectory", "/run")):
            mode = settings.get(setting.replace("Directory", "DirectoryMode"), ["0755"])[0]
            for name in settings.get(setting, []):
                tree.service_directory(base, name, mode)
        for value in settings.get("ReadWritePaths", []):
            for path in value.split():
                tree.writable.append(tree.path(path))
    finally:
        os.umask(previous_umask)


def sandbox_prefix(tree: Layout) -> tuple[str, ...]:
    """A command that runs the rest of its arguments in the unit's sandbox."""
    writable = " ".join(str(p) for p in tree.writable)
    return ("unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", SANDBOX, "sandbox", writable)


def sandbox_env(tree: Layout) -> dict[str, str]:
    """What SANDBOX reads from its environment."""
    return {"NODE_UID": str(NODE_UID), "NODE_GID": str(NODE_GID),
            "UNIT_UMASK": unit_settings()["UMask"][0]}


def sandboxed_node(tree: Layout) -> DisqueProcess:
    """The node as the unit starts it, in the sandbox, with the installed config."""
    settings = unit_settings()
    assert settings["User"] == ["disque"] and settings["ProtectSystem"] == ["strict"]
    state = tree.path(settings["WorkingDirectory"][0])
    exec_start = shlex.split(settings["ExecStart"][0])
    assert exec_start[1] == "/etc/disque/disque.conf"
    # The unit's command-line directives, with the layout's paths; no
    # NOTIFY_SOCKET here, so no systemd supervision either.
    args = [tree.path(a).as_posix() if a.startswith("/") else a for a in exec_start[2:]]
    args[args.index("--supervised") + 1] = "no"
    # No PYTHONPATH, as under systemd: the node imports the installed package.
    node = DisqueProcess(
        state, config_path=tree.config, config_head=SHIPPED_CONFIG.read_text(),
        config="appendonly yes\n", args=tuple(args),
        env=dict(sandbox_env(tree), HOME=str(state), PYTHONPATH=""),
        prefix=sandbox_prefix(tree), server=(tree.path(exec_start[0]).as_posix(),))
    # DisqueProcess wrote the file as root: the install step's owner again.
    os.chown(tree.config, NODE_UID, NODE_GID)
    return node


def test_config_rewrite_works_under_the_units_layout(layout):
    """CONFIG REWRITE, ACL SETUSER and CONFIG SET saved with it, and the
    controlled restart, as the unit's user in the unit's sandbox."""
    node = sandboxed_node(layout)
    try:
        node.start()
        config = layout.config
        assert node.call("CONFIG", "REWRITE") == b"OK"
        assert node.call("ACL", "SETUSER", "worker", "on", ">long-random-password",
                         "~orders:*", "+@consume", "+@connection") == b"OK"
        assert node.call("CONFIG", "SET", "protected-mode", "no") == b"OK"
        assert node.call("CONFIG", "REWRITE") == b"OK"
        text = config.read_text()
        assert re.search(r"^user worker on #[0-9a-f]{64} ~orders:\* ", text, re.M), text
        assert re.search(r"^protected-mode no$", text, re.M)
        assert oct(os.stat(config).st_mode & 0o777) == "0o640"

        # The controlled restart of docs/persistence.md.
        ids = [node.call("ADDJOB", "orders", "job %d" % i, 0) for i in range(10)]
        assert node.call("CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
        assert node.call("CONFIG", "REWRITE") == b"OK"
        assert re.search(r"^aof-enqueue-jobs-once yes$", config.read_text(), re.M)
        with contextlib.suppress(redis.exceptions.ConnectionError):  # closed as it exits
            node.call("SHUTDOWN", "REWRITE-AOF")
        assert node.wait_exit() == 0
        node.start()
        assert node.call("QLEN", "orders") == len(ids)
        # After that load the node sets the directive back and saves it.
        wait_until(lambda: re.search(r"^aof-enqueue-jobs-once no$", config.read_text(), re.M),
                   message="aof-enqueue-jobs-once reset in %s" % config)
        assert "Could not reset" not in node.log_path.read_text()
        assert node.raw(b"AUTH worker long-random-password\r\n") == b"+OK\r\n"
        assert re.search(r"^user worker on ", config.read_text(), re.M)
    finally:
        node.stop()


def test_the_sandbox_is_read_only_outside_the_units_paths(layout):
    """The sandbox is real: as the node's uid, a directory of its own outside
    the unit's paths is read-only and one of them is not, so the test above
    shows that the unit's paths are enough."""
    outside = layout.root / "var"
    os.chown(outside, NODE_UID, NODE_GID)
    inside = layout.config.parent
    env = dict(os.environ, **sandbox_env(layout))
    probe = subprocess.run([*sandbox_prefix(layout), "sh", "-c",
                            "id -u; touch %s/probe; touch %s/probe" % (inside, outside)],
                           env=env, capture_output=True, text=True, timeout=60)
    assert probe.stdout.split() == [str(NODE_UID)], probe.stderr
    assert "Read-only file system" in probe.stderr and str(outside) in probe.stderr, probe.stderr
    assert (inside / "probe").exists() and not (outside / "probe").exists()
