"""The compose cluster: docker-compose.yml, deploy/ and the Dockerfiles are checked by parsing
them (no Docker engine here), and the same topology runs as local processes: a Redis Cluster
formed by deploy/redis-cluster-init.sh from nodes configured by deploy/redis-cluster.conf, and
three servers started with the compose file's own commands, probed by its own health check.
Also: the generated protobuf code matches the .proto.

    redis-1..6 --(healthy)--> redis-cluster-init --(completed)--> mtaw1, mtaw2, mtaw3
    spark-master --(healthy)--> spark-worker
    mtaw1..3 (healthy) + spark-master (healthy) + spark-worker --> job
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis
import yaml

from mtawindows.client import Aggregation, Field, Policy, StreamSpec, WindowClient, WindowSpec
from mtawindows.server.serve_command import build_parser as server_parser
from mtawindows.server.storage.embedded import server_binary
from mtawindows.server.storage.processes import dying_with_parent, spawn
from mtawindows.testing import RedisCluster, free_ports
from mtawindows.v1 import windows_pb2 as pb
from mtawindows.v1 import windows_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.server, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
REDIS_NODES = [f"redis-{i}" for i in range(1, 7)]
SERVERS = ["mtaw1", "mtaw2", "mtaw3"]
SEEDS = "mtaw1:50051,mtaw2:50051,mtaw3:50051"
SPARK_MASTER = "spark://spark-master:7077"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]  # type: ignore[no-any-return]


def depends(service: dict[str, Any]) -> dict[str, str]:
    """``depends_on`` as service -> condition (a list means ``service_started``)."""
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return dict.fromkeys(deps, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """Bind mounts of files of this repository: container path -> repository path."""
    out = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("./"):
            out[target] = source[2:]
    return out


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``ports`` as (host address, host port, container port)."""
    out = []
    for spec in service.get("ports", []):
        host, hport, cport = str(spec).split(":")
        out.append((host, int(hport), int(cport)))
    return out


def conf(path: Path) -> dict[str, str]:
    """A redis.conf file as directive -> value (comments and blank lines dropped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            out[key] = value.strip()
    return out


# --------------------------------------------------------------------------- the files


def test_generated_proto_code_is_up_to_date() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mtawindows.v1.generate", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def test_compose_services(services: dict[str, Any]) -> None:
    assert set(services) == {
        *REDIS_NODES,
        "redis-cluster-init",
        *SERVERS,
        "spark-master",
        "spark-worker",
        "job",
    }


def test_redis_nodes_run_in_cluster_mode_with_aof(services: dict[str, Any]) -> None:
    for name in REDIS_NODES:
        node = services[name]
        assert re.match(r"^(valkey/valkey|redis):\d", node["image"]), node["image"]
        cmd = node["command"]
        assert cmd[0] in ("valkey-server", "redis-server")
        config = conf(ROOT / mounts(node)[cmd[1]])  # the config file is this repo's
        flags = dict(zip(cmd[2::2], cmd[3::2], strict=True))
        assert config["cluster-enabled"] == "yes"
        assert config["port"] == "6379"
        assert config["appendonly"] == "yes"  # AOF on
        assert config["cluster-preferred-endpoint-type"] == "hostname"
        assert flags["--cluster-announce-hostname"] == name  # clients reach it by its name
        assert node["healthcheck"]["test"][0] == "CMD"
        assert node["healthcheck"]["test"][1] in ("valkey-cli", "redis-cli")
        assert any(v.endswith(":/data") for v in node["volumes"])  # nodes.conf + AOF kept
        assert "ports" not in node  # the cluster stays inside the compose network


def test_cluster_init_runs_once_after_every_node_is_healthy(services: dict[str, Any]) -> None:
    init = services["redis-cluster-init"]
    assert depends(init) == dict.fromkeys(REDIS_NODES, "service_healthy")
    assert init["restart"] == "no"  # one-shot
    script = ROOT / mounts(init)[init["entrypoint"][-1]]
    text = script.read_text()
    assert "--cluster create" in text
    assert "--cluster-replicas 1" in text
    assert "--cluster-yes" in text
    nodes = init["environment"]["REDIS_CLUSTER_NODES"].split()
    assert nodes == [f"{n}:6379" for n in REDIS_NODES]
    assert init["environment"]["REDIS_CLI"] in ("valkey-cli", "redis-cli")


def test_servers_are_three_members_of_the_cluster(services: dict[str, Any]) -> None:
    """Each server: the repo's Dockerfile, `serve` flags the real parser accepts, a distinct
    advertised address on the compose network, the Redis Cluster URL and WAIT for a replica."""
    parser = server_parser()
    advertised = set()
    for name in SERVERS:
        app = services[name]
        context = ROOT / app["build"]["context"]
        assert (context / app["build"]["dockerfile"]).is_file()
        args = parser.parse_args(app["command"])  # the flags `mtawindows serve` accepts
        assert args.host == "0.0.0.0"
        assert args.port == 50051
        assert args.advertise == f"{name}:{args.port}"  # reachable by its service name
        advertised.add(args.advertise)
        assert args.redis_url == "redis+cluster://redis-1:6379,redis-2:6379,redis-3:6379"
        seeds = args.redis_url.removeprefix("redis+cluster://").split(",")
        assert {s.split(":")[0] for s in seeds} <= set(REDIS_NODES)
        assert args.redis_wait_replicas == 1
        assert args.workers == 1
        assert depends(app) == {"redis-cluster-init": "service_completed_successfully"}
        test = app["healthcheck"]["test"]
        assert test[0] == "CMD" and "grpc_health" in " ".join(test)
        assert f"127.0.0.1:{args.port}" in " ".join(test)
        ports = {cport: hport for _, hport, cport in published(app)}
        assert 50051 in ports
        if args.metrics_port:
            assert args.metrics_port in ports
    assert len(advertised) == len(SERVERS)


def test_spark_master_worker_and_the_demo_job(services: dict[str, Any]) -> None:
    master, worker, job = services["spark-master"], services["spark-worker"], services["job"]
    for svc in (master, worker, job):
        assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
    assert master["image"] == worker["image"] == job["image"]  # one Spark, one Python
    mcmd = master["command"]
    assert mcmd[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert mcmd[mcmd.index("--host") + 1] == "spark-master"
    assert mcmd[mcmd.index("--port") + 1] == "7077"
    wcmd = worker["command"]
    assert wcmd[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    assert SPARK_MASTER in wcmd
    assert depends(worker) == {"spark-master": "service_healthy"}
    for svc in (master, worker):
        assert svc["healthcheck"]["test"][0] == "CMD"

    # the job: the demo against the three servers (the seed list), after they are healthy
    cmd = job["command"]
    assert cmd[:3] == ["python", "-m", "mtawindows.spark_connector.demo"]
    from mtawindows.spark_connector.demo import _arguments

    args = _arguments(cmd[3:])  # flags the demo really accepts
    assert args.endpoint == SEEDS
    advertised = {server_parser().parse_args(services[s]["command"]).advertise for s in SERVERS}
    assert set(args.endpoint.split(",")) == advertised
    assert job["environment"]["SPARK_MASTER_URL"] == SPARK_MASTER
    deps = depends(job)
    assert all(deps[s] == "service_healthy" for s in SERVERS)
    assert deps["spark-master"] == "service_healthy"
    assert job["restart"] == "no"


def test_compose_wiring(compose: dict[str, Any], services: dict[str, Any]) -> None:
    """Every depends_on names a service; no host network; published ports are distinct and on
    loopback; every file of this repo the compose mounts or builds from exists; volumes are
    declared."""
    host_ports: list[int] = []
    declared = set(compose.get("volumes") or {})
    for name, svc in services.items():
        assert set(depends(svc)) <= set(services), name
        assert name not in depends(svc)
        assert svc.get("network_mode") != "host", name
        assert "networks" not in svc or "host" not in svc["networks"], name
        for host, hport, _ in published(svc):
            assert host == "127.0.0.1", name
            host_ports.append(hport)
        for source in mounts(svc).values():
            assert (ROOT / source).exists(), source
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith(("./", "/")):
                assert source in declared, volume
        if "build" in svc:
            assert (ROOT / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        if "healthcheck" in svc:
            assert svc["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
    assert len(host_ports) == len(set(host_ports))


def test_every_deploy_file_is_used(services: dict[str, Any]) -> None:
    """The scripts and configs under deploy/ are the ones the compose file names."""
    used = {source for svc in services.values() for source in mounts(svc).values()}
    used |= {str(Path(svc["build"]["dockerfile"])) for svc in services.values() if "build" in svc}
    for path in sorted((ROOT / "deploy").iterdir()):
        rel = str(path.relative_to(ROOT))
        if rel.endswith(".dockerignore"):  # the ignore file of the Dockerfile beside it
            assert rel.removesuffix(".dockerignore") in used
        else:
            assert rel in used, rel


def _copied(dockerfile: Path) -> set[str]:
    text = dockerfile.read_text()
    out = set()
    for src in re.findall(r"^COPY (.+?) \S+$", text, flags=re.M):
        for path in src.split():
            assert (ROOT / path).exists(), f"{dockerfile.name}: COPY {path}"
            out.add(path)
    return out


@pytest.mark.parametrize("dockerfile", ["Dockerfile", "deploy/spark.Dockerfile"])
def test_dockerfiles_copy_every_package(dockerfile: str) -> None:
    """Both images `pip install .`: every package folder of pyproject.toml must be copied."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    folders = {d.split("/")[0] for d in pyproject["tool"]["setuptools"]["package-dir"].values()}
    copied = _copied(ROOT / dockerfile)
    assert folders | {"pyproject.toml", "README.md"} <= copied


def test_dockerfile_serves() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["mtawindows", "serve"\]', text, flags=re.M)
    assert "HEALTHCHECK" in text
    cmd = re.search(r"^CMD (\[.*\])$", text, flags=re.M)
    assert cmd is not None
    server_parser().parse_args(yaml.safe_load(cmd.group(1)))


def test_spark_image_runs_the_spark_the_connector_is_tested_with() -> None:
    text = (ROOT / "deploy/spark.Dockerfile").read_text()
    version = re.search(r"^ARG SPARK_VERSION=(\S+)$", text, flags=re.M)
    assert version is not None
    assert '"pyspark==${SPARK_VERSION}"' in text
    assert re.search(r"^FROM python:3\.(1[1-9])", text, flags=re.M)  # mtawindows: 3.11+
    try:
        tested = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        pytest.skip("pyspark is not installed here")
    assert version.group(1).split(".")[:2] == tested.split(".")[:2]


def test_docker_compose_config_is_valid() -> None:
    """`docker compose config -q` where the compose plugin is installed (it needs no engine)."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker client")
    probe = subprocess.run(
        [docker, "compose", "version"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        pytest.skip("no docker compose plugin")
    r = subprocess.run(
        [docker, "compose", "-f", str(ROOT / "docker-compose.yml"), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr


# --------------------------------------------------------------------------- as local processes


def _wait(what: str, probe: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


@pytest.fixture
def cluster_nodes(tmp_path: Path) -> Iterator[list[str]]:
    """Six nodes started as the compose file starts redis-1..6 (deploy/redis-cluster.conf, its
    name announced), on loopback ports; their addresses as ``localhost:port``."""
    procs: list[subprocess.Popen[bytes]] = []
    ports = free_ports(12)
    addresses = []
    try:
        for i in range(6):
            port, bus = ports[2 * i], ports[2 * i + 1]
            data = tmp_path / f"redis-{i + 1}"
            data.mkdir()
            cmd = dying_with_parent(
                [
                    server_binary(),
                    str(ROOT / "deploy/redis-cluster.conf"),
                    "--cluster-announce-hostname",
                    "localhost",
                    "--port",
                    str(port),
                    "--cluster-port",
                    str(bus),
                    "--bind",
                    "127.0.0.1",
                    "--dir",
                    str(data),
                    "--logfile",
                    str(data / "log"),
                    "--daemonize",
                    "no",
                ]
            )

            def popen(cmd: list[str] = cmd) -> subprocess.Popen[bytes]:
                return subprocess.Popen(cmd)

            procs.append(spawn(popen))
            addresses.append(f"localhost:{port}")
        yield addresses
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)


def test_redis_cluster_init_script_forms_the_cluster_once(cluster_nodes: list[str]) -> None:
    """deploy/redis-cluster-init.sh on six nodes configured by deploy/redis-cluster.conf: three
    primaries with one replica each; run again, it leaves the formed cluster alone."""
    cli = shutil.which("valkey-cli") or shutil.which("redis-cli")
    if cli is None:
        pytest.skip("no valkey-cli/redis-cli here (apt-get install redis-tools)")
    env = {
        **os.environ,
        "REDIS_CLUSTER_NODES": " ".join(cluster_nodes),
        "REDIS_CLI": cli,
        "REDIS_CLUSTER_WAIT": "60",
    }
    script = str(ROOT / "deploy/redis-cluster-init.sh")
    r = subprocess.run(["sh", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    port = int(cluster_nodes[0].split(":")[1])
    with redis.Redis(port=port, decode_responses=True) as client:
        assert client.cluster("info")["cluster_state"] == "ok"
    nodes = subprocess.run(
        [cli, "-p", str(port), "cluster", "nodes"], capture_output=True, text=True, timeout=30
    ).stdout
    rows = [line.split() for line in nodes.splitlines() if line.strip()]
    primaries = [r for r in rows if "master" in r[2] and len(r) > 8]  # with slots
    replicas = [r for r in rows if "slave" in r[2]]
    assert len(primaries) == 3 and len(replicas) == 3, nodes
    assert sorted(r[3] for r in replicas) == sorted(p[0] for p in primaries)  # one each
    assert all(r[1].endswith(",localhost") for r in rows), nodes  # the announced name
    again = subprocess.run(["sh", script], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "already formed" in again.stdout


def _command(services: dict[str, Any], name: str, *, port: int, cluster_url: str) -> list[str]:
    """The compose command of server ``name`` on this machine: loopback, the given port
    (advertised as 127.0.0.1:port), the test cluster's URL and no metrics port."""
    args = list(services[name]["command"])
    swap = {
        "--host": "127.0.0.1",
        "--port": str(port),
        "--advertise": f"127.0.0.1:{port}",
        "--redis-url": cluster_url,
        "--metrics-host": "127.0.0.1",
        "--metrics-port": "0",
    }
    for flag, value in swap.items():
        if flag in args:
            args[args.index(flag) + 1] = value
    return args


@pytest.mark.spark
@pytest.mark.slow
def test_compose_servers_as_local_processes(services: dict[str, Any], tmp_path: Path) -> None:
    """The compose topology as local processes: a Redis Cluster (3 primaries, 1 replica each),
    mtaw1..3 started with the compose file's commands (each passes the compose health check; a
    client given the three seeds creates and feeds a stream that lands in the cluster), then the
    compose job's command (the Spark demo through the connector, routed over the three servers)
    with a local Spark master and fewer hosts and hours."""
    procs: list[subprocess.Popen[bytes]] = []
    with RedisCluster() as cluster:
        ports = free_ports(len(SERVERS))
        try:
            for name, port in zip(SERVERS, ports, strict=True):
                args = _command(services, name, port=port, cluster_url=cluster.cluster_url)
                port_file = tmp_path / f"{name}.port"
                env = {k: v for k, v in os.environ.items() if not k.startswith("MTAWINDOWS_")}
                with (tmp_path / f"{name}.log").open("ab") as log:
                    procs.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                "-m",
                                "mtawindows.server",
                                *args,
                                "--port-file",
                                str(port_file),
                                "--flush-interval",
                                "0.2",
                            ],
                            stdout=log,
                            stderr=log,
                            env=env,
                        )
                    )

            def serving(port_file: Path, proc: subprocess.Popen[bytes], name: str) -> bool:
                if proc.poll() is not None:
                    log = (tmp_path / f"{name}.log").read_text()[-3000:]
                    raise AssertionError(f"{name} exited {proc.returncode}: {log}")
                return port_file.exists() and bool(port_file.read_text())

            for name, proc in zip(SERVERS, procs, strict=True):
                _wait(
                    f"{name} serving", lambda n=name, p=proc: serving(tmp_path / f"{n}.port", p, n)
                )
            for name, port in zip(SERVERS, ports, strict=True):
                test = services[name]["healthcheck"]["test"]
                probe = [sys.executable if t == "python" else t for t in test[1:]]
                probe = [p.replace("127.0.0.1:50051", f"127.0.0.1:{port}") for p in probe]
                r = subprocess.run(probe, capture_output=True, text=True, timeout=60, check=False)
                assert r.returncode == 0, f"{name}: {shlex.join(probe)}: {r.stderr}"

            seeds = ",".join(f"127.0.0.1:{p}" for p in ports)
            with WindowClient(seeds) as c:
                c.create_stream(StreamSpec("t", (Field("x"),), wall_clock=False))
                c.create_window(
                    WindowSpec("t", "w", (Aggregation("n", "count"),), Policy.count(10))
                )
                c.append("t", {"ts": [1, 2], "x": [1.0, 2.0]})
            with WindowClient(seeds) as c:
                assert "t" in [s.spec.name for s in c.list_streams()]
            job = list(services["job"]["command"])
            job[job.index("--endpoint") + 1] = seeds
            job[job.index("--master") + 1] = "local[2]"
            job[job.index("--work") + 1] = str(tmp_path / "work")
            job[job.index("--out") + 1] = str(tmp_path / "out")
            job = [sys.executable if t == "python" else t for t in job]
            r = subprocess.run(
                [*job, "--hosts", "2", "--hours", "1"],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            assert "equal pandas" in r.stdout, r.stdout[-3000:]
            assert list((tmp_path / "out").glob("*.png"))
            # the demo's keyed stream: its key groups spread over the servers
            with grpc.insecure_channel(seeds.split(",")[0]) as ch:
                m = pb_grpc.WindowServiceStub(ch).GetClusterMap(
                    pb.GetClusterMapRequest(streams=["telemetry"]), timeout=10
                )
            holders = set(m.owners[0].group_members)
            assert len(holders - {""}) >= 2, holders
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
