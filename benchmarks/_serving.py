"""The job queue and replicas benchmarks of bench_server.py (issue 31).

``job_benchmark``: a 400,000-cell table (AREA x AGE x SEX x ETHNIC, 424,200
inner cells, 751,842 with margins) on the 10M-person census-like data of
bench_census.py, built by ``tablesafe worker --once`` in a fresh process,
against the same table built directly (the table service with the limits
lifted, then the table endpoint's CSV writer) in another: wall time, peak
resident memory of each, and whether the two CSV files are the same bytes.

``writer_memory``: for tables of 36,000 to 1,250,000 cells, the peak memory
that writing the CSV adds to a built table, the streamed writer's against
``to_csv``'s, each table in a fresh process (the peak is reset before the
write: /proc/self/clear_refs).

``replicas_benchmark``: 1 and 2 ``tablesafe serve`` replicas on one
PostgreSQL (a throwaway cluster, as the tests start theirs), 32 clients
spread over them, CPU-bound tables (the table cache off: every request is
protected anew), rounds alternating; tables per second, p50 and p99, the
machine's load average around each round, the cores used (replicas,
PostgreSQL, clients, the rest of the machine: /proc), and the guard's lock
timers of _replica.py.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
SECRET = "serving-benchmark-secret-0123456789abcdef"
JOB_TABLE = {"dimensions": ["AREA", "AGE", "SEX", "ETHNIC"], "statistic": "count"}


def _census_site(folder: Path, data: Path, *, max_cells: int, state: str | None = None) -> Path:
    (folder / "secret").write_text(SECRET)
    state_part = f'\n[state]\nurl = "{state}"\n' if state else ""
    path = folder / "site.toml"
    path.write_text(
        f"""
[server]
audit_db = "{folder / "state.sqlite"}"
rate_limit_per_minute = 1000000
{state_part}
[[datasets]]
name = "census"
path = "{data}"

[datasets.protection]
method = "ckm"
seeds = "keyed"
secret_file = "{folder / "secret"}"

[datasets.rules]
max_dimensions = 4
max_cells = {max_cells}
max_job_cells = 1000000
query_timeout_seconds = 3600
job_timeout_seconds = 3600
"""
    )
    return path


_MAXRSS = "import resource, sys; print('MAXRSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"  # noqa: E501

_WORKER = (
    """
import sys
from tablesafe._cli import main
try:
    main(["worker", "--config", {config!r}, "--once"])
except SystemExit:
    pass
"""
    + _MAXRSS
)

_DIRECT = (
    """
from tablesafe._settings import load_site_config
from tablesafe.output._formats import WriteOptions, output_format
from tablesafe.server import Principal, TableBody, TableService
site = load_site_config({config!r})
service = TableService(site)
table = service.table(Principal("bench", "user", 0), "census", TableBody(**{body!r}).to_request())
data = output_format("csv", served=True).write(table, WriteOptions(footnotes=True, labels=False))
open({out!r}, "w", encoding="utf-8", newline="").write(data)
service.close()
"""
    + _MAXRSS
)


def _measured(code: str) -> tuple[float, int]:
    """Wall seconds and peak resident MiB of ``code`` run in a fresh Python."""
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    kib = int(re.findall(r"MAXRSS (\d+)", done.stderr)[-1])
    return seconds, kib // 1024


def job_benchmark(records: int) -> None:
    sys.path.insert(0, str(BENCH))
    from bench_census import make_census
    from tablesafe.state import SQLiteState
    from tablesafe.state._jobs import JobQueue

    data = make_census(records).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        jobs, lifted = Path(tmp) / "jobs", Path(tmp) / "direct"
        jobs.mkdir(), lifted.mkdir()
        config = _census_site(jobs, data, max_cells=10_000)
        store = SQLiteState(jobs / "state.sqlite")
        queue = JobQueue(store)
        request = {"body": JOB_TABLE, "format": "csv", "footnotes": True, "labels": False}
        job_id = queue.submit("bench", "census", request)
        job_s, job_mib = _measured(_WORKER.format(config=str(config)))
        job = queue.get(job_id)
        assert job is not None and job["status"] == "done", job
        result = b"".join(queue.parts(job_id, job["attempts"], job["parts"]))
        store.close()
        out = lifted / "direct.csv"
        direct_config = _census_site(lifted, data, max_cells=1_000_000)
        direct_s, direct_mib = _measured(
            _DIRECT.format(config=str(direct_config), body=JOB_TABLE, out=str(out))
        )
        same = out.read_bytes() == result
    rows = result.count(b"\n")
    print(f"census-like {records:,} persons; AREA x AGE x SEX x ETHNIC, ckm keyed seeds, guard on")
    csv_mib = len(result) / 2**20
    print(f"job (tablesafe worker --once, fresh process): {job_s:.1f} s, peak {job_mib} MiB, "
          f"{csv_mib:.1f} MiB of CSV in {job['parts']} pieces, {rows:,} lines")  # fmt: skip
    print(f"direct build, limits lifted (fresh process): {direct_s:.1f} s, peak {direct_mib} MiB")
    print(f"the job's CSV is the direct CSV, byte for byte: {same}")


_WRITER = """
import sys
from tablesafe._builder import TableBuilder
from tablesafe._cli._methods import protection_from_options
from tablesafe._request import TableRequest
from tablesafe.catalog._dataset import Dataset
from tablesafe.output._stream import csv_pieces

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) // 1024

builder = TableBuilder(Dataset.open({data!r}), protection_from_options("ckm"))
table = builder.build(TableRequest({dims!r}, statistic="count"))
cells = int(table.computed.sum())
table.statistics(); table.footnote_comments()
def streamed():
    n = 0
    for piece, _ in csv_pieces(table, footnotes=True):
        n += len(piece)
    return n
def whole():
    return len(table.to_csv(footnotes=True).encode())
for name, write in (("streamed", streamed), ("to_csv", whole)) if {streamed_first} else (("to_csv", whole), ("streamed", streamed)):
    before = rss("VmRSS")
    open("/proc/self/clear_refs", "w").write("5")
    size = write()
    print(name, cells, size, rss("VmHWM") - before)
"""  # noqa: E501

WRITER_TABLES = [
    ("AREA", "AGE"),
    ("AREA", "AGE", "SEX"),
    ("AREA", "AGE", "ETHNIC"),
    ("AREA", "AGE", "SEX", "ETHNIC"),
    ("AREA", "AGE", "TENURE", "ETHNIC"),
]


def writer_memory(records: int) -> None:
    sys.path.insert(0, str(BENCH))
    from bench_census import make_census

    data = make_census(records).resolve()
    print(f"CSV writer's added peak memory (MiB) on census-like {records:,}, fresh process each")
    print("cells, bytes, streamed writer, to_csv")
    for dims in WRITER_TABLES:
        found: dict[str, tuple[int, int, int]] = {}
        # Each writer measured first once (its peak is reset, but the heap it leaves is not).
        for first in (True, False):
            code = _WRITER.format(data=str(data), dims=dims, streamed_first=first)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError(out.stderr[-3000:])
            lines = out.stdout.split("\n")
            name, cells, size, mib = lines[0].split()
            found[name] = (int(cells), int(size), int(mib))
        cells, size, streamed = found["streamed"]
        print(f"{cells:,}, {size:,}, {streamed}, {found['to_csv'][2]}   ({' x '.join(dims)})")


# -- replicas ---------------------------------------------------------------------------------


def _serve(
    config: Path, stats: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, int]:
    """A replica (``tablesafe serve`` with the guard's timers of _replica.py) and its port."""
    process = subprocess.Popen(
        [sys.executable, str(BENCH / "_replica.py"), "serve", "--config", str(config),
         "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {}), "TABLESAFE_BENCH_STATS": str(stats)},
    )  # fmt: skip
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], 300)
    line = process.stdout.readline() if ready else b""
    found = re.search(rb":(\d+)/", line)
    if not found:
        process.kill()
        raise RuntimeError("a replica did not start")
    return process, int(found.group(1))


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    """CPU seconds (user and system, every thread) of a live process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _postgres_pids(postmaster: int) -> list[int]:
    """The postmaster and its children (one backend per pooled connection)."""
    found = [postmaster]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                found.append(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


def _machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all cores; /proc/stat)."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / _TICK


class _CpuShares:
    """Cores used during a round by the replicas, PostgreSQL, the clients and everything else."""

    def __init__(self, replicas: list[int], postmaster: int) -> None:
        self.replicas, self.postmaster = replicas, postmaster
        self.start = self._now()

    def _now(self) -> dict[str, Any]:
        own = os.times()
        return {
            "replicas": sum(_cpu(p) for p in self.replicas),
            "postgres": {p: _cpu(p) for p in _postgres_pids(self.postmaster)},
            "clients": own.user + own.system,
            "machine": _machine_busy(),
            "wall": time.perf_counter(),
        }

    def cores(self) -> dict[str, float]:
        end, start = self._now(), self.start
        wall = end["wall"] - start["wall"]
        pg = sum(c - start["postgres"].get(p, 0.0) for p, c in end["postgres"].items())
        used = {k: (end[k] - start[k]) / wall for k in ("replicas", "clients", "machine")}
        used["postgres"] = pg / wall
        used["other"] = used["machine"] - used["replicas"] - used["postgres"] - used["clients"]
        return used


def _guard_times(processes: list[subprocess.Popen], stats: list[Path]) -> dict[str, list[float]]:
    """The guard's timers of the replicas (see _replica.py) since they were last asked."""
    merged: dict[str, list[float]] = {}
    for process, path in zip(processes, stats, strict=True):
        path.unlink(missing_ok=True)
        process.send_signal(signal.SIGUSR1)
        for _ in range(500):
            if path.exists():
                break
            time.sleep(0.01)
        for name, values in json.loads(path.read_text()).items():
            merged.setdefault(name, []).extend(values)
    return merged


def _load(ports: list[int], pool: list[dict], clients: int, seconds: float) -> dict[str, float]:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        rng = random.Random(i)
        # Clients spread evenly over the replicas, as a load balancer would.
        con = http.client.HTTPConnection("127.0.0.1", ports[i % len(ports)], timeout=60)
        while time.monotonic() < stop:
            body = json.dumps(rng.choice(pool))
            t0 = time.perf_counter()
            try:
                con.request("POST", "/api/datasets/demo/tables", body,
                            {"content-type": "application/json"})  # fmt: skip
                answer = con.getresponse()
                answer.read()
                ok = answer.status == 200
            except OSError:
                ok = False
                con.close()
            with lock:
                latencies.append(time.perf_counter() - t0)
                errors[0] += not ok

    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {
        "tables/s": len(lat) / wall,
        "p50 ms": 1000 * statistics.median(lat),
        "p99 ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "errors": errors[0],
        "load before": load,
        "load after": os.getloadavg()[0],
    }


def replicas_benchmark(site_text: str, pool: list[dict], clients: int, seconds: float,
                       rounds: int) -> None:  # fmt: skip
    sys.path.insert(0, str(BENCH.parent / "tests"))
    from _postgres import Cluster, binaries

    cluster = Cluster(binaries()).start()
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    results: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            config = Path(tmp) / "site.toml"
            url = cluster.database()
            config.write_text(site_text.replace("[server]", f'[state]\nurl = "{url}"\n\n[server]'))
            stats = [Path(tmp) / f"replica{i}.json" for i in range(2)]
            replicas = [_serve(config, path) for path in stats]
            processes = [p for p, _ in replicas]
            try:
                for port in (p for _, p in replicas):  # warm each replica's cubes
                    _load([port], pool, 4, 5.0)
                for _ in range(rounds):
                    for n in (1, 2):
                        ports = [p for _, p in replicas[:n]]
                        _guard_times(processes, stats)  # from now on
                        shares = _CpuShares([p.pid for p in processes], postmaster)
                        result: dict[str, Any] = _load(ports, pool, clients, seconds)
                        result["cores"] = shares.cores()
                        result["guard"] = _guard_times(processes[:n], stats[:n])
                        results[n].append(result)
            finally:
                _stop(processes)
    finally:
        cluster.stop()
    _report_replicas(results, clients, seconds, rounds)


def _report_replicas(
    results: dict[int, list[dict[str, Any]]], clients: int, seconds: float, rounds: int
) -> None:
    print(f"{clients} clients, {seconds:.0f} s per round, {rounds} rounds alternating, "
          f"{os.cpu_count()} cores, PostgreSQL state")  # fmt: skip
    for n, runs in results.items():
        for r in runs:
            print(f"{n} replica(s): {r['tables/s']:.1f} tables/s, p50 {r['p50 ms']:.0f} ms, "
                  f"p99 {r['p99 ms']:.0f} ms, errors {r['errors']:.0f}, load average "
                  f"{r['load before']:.1f} -> {r['load after']:.1f}")  # fmt: skip
            cores = r["cores"]
            print("    cores used: " + ", ".join(f"{k} {v:.2f}" for k, v in cores.items()))
            times = r["guard"]
            borrows, waited = sum(times.pop("pool borrows", [])), sum(times.pop("pool wait", []))
            trips = sum(times.pop("round trips", []))
            if times.get("table"):
                print(f"    PostgreSQL round trips per table: {trips / len(times['table']):.1f}")
            if borrows:
                print(f"    connection pool: {borrows:.0f} borrows, waiting "
                      f"{1000 * waited / borrows:.2f} ms per borrow")  # fmt: skip
            if times.get("table"):
                tables = len(times["table"])
                ms = {k: (1000 * statistics.mean(v), 1000 * statistics.median(v))
                      for k, v in times.items() if v}  # fmt: skip
                parts = ", ".join(f"{k} {a:.1f} ms (p50 {b:.1f})" for k, (a, b) in ms.items())
                print(f"    per table in the service ({tables}), mean: {parts}")
    ratios = [b["tables/s"] / a["tables/s"] for a, b in zip(results[1], results[2], strict=True)]
    print("throughput ratio 2 replicas / 1, per round: " + ", ".join(f"{r:.2f}" for r in ratios))


# -- configurations compared ------------------------------------------------------------------


def _configuration(name: str) -> tuple[str, dict[str, str]]:
    """``N`` or ``Np``: ``[server] concurrent_tables = N``, ``p`` the pipelined prototype."""
    pipelined = name.endswith("p")
    lines = f"concurrent_tables = {int(name.rstrip('p'))}"
    return lines, {"TABLESAFE_BENCH_PIPELINED": "1"} if pipelined else {}


def configurations_benchmark(site_text: str, pool: list[dict], clients: int, seconds: float,
                             rounds: int, names: list[str]) -> None:  # fmt: skip
    """Each configuration with two replicas of its own on one PostgreSQL, rounds alternating.

    Per round and configuration, 1 then 2 of its replicas under ``clients``
    clients (the other configurations' replicas idle): tables per second,
    the cores used, and the guard lock's wait and hold per table.
    """
    sys.path.insert(0, str(BENCH.parent / "tests"))
    from _postgres import Cluster, binaries

    cluster = Cluster(binaries()).start()
    postmaster = int((cluster.data / "postmaster.pid").read_text().split()[0])
    found: dict[tuple[str, int], list[float]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            url = cluster.database()
            groups = []
            for i, name in enumerate(names):
                lines, env = _configuration(name)
                config = Path(tmp) / f"site{i}.toml"
                config.write_text(site_text.replace(
                    "[server]", f'[state]\nurl = "{url}"\n\n[server]\n{lines}', 1))  # fmt: skip
                stats = [Path(tmp) / f"replica{i}-{j}.json" for j in range(2)]
                groups.append(([_serve(config, path, env) for path in stats], stats))
            try:
                for replicas, _ in groups:  # warm each replica's cubes
                    for _, port in replicas:
                        _load([port], pool, 4, 5.0)
                for r in range(rounds):
                    for name, (replicas, stats) in zip(names, groups, strict=True):
                        for n in (1, 2):
                            processes = [p for p, _ in replicas[:n]]
                            _guard_times(processes, stats[:n])
                            shares = _CpuShares([p.pid for p, _ in replicas], postmaster)
                            out = _load([port for _, port in replicas[:n]], pool, clients, seconds)
                            cores = shares.cores()
                            times = _guard_times(processes, stats[:n])
                            found.setdefault((name, n), []).append(out["tables/s"])
                            _report_configuration(name, n, r, out, cores, times)
            finally:
                for replicas, _ in groups:
                    _stop([process for process, _ in replicas])
    finally:
        cluster.stop()
    for name in names:
        ratios = [b / a for a, b in zip(found[(name, 1)], found[(name, 2)], strict=True)]
        print(f"{name}: throughput ratio 2 replicas / 1, per round: "
              + ", ".join(f"{x:.2f}" for x in ratios))  # fmt: skip


def _report_configuration(
    name: str,
    n: int,
    r: int,
    out: dict[str, float],
    cores: dict[str, float],
    times: dict[str, list[float]],
) -> None:
    def mean(key: str) -> float:
        return 1000 * statistics.mean(times[key]) if times.get(key) else float("nan")

    print(f"{name} round {r}, {n} replica(s): {out['tables/s']:.1f} tables/s, p50 "
          f"{out['p50 ms']:.0f} ms, p99 {out['p99 ms']:.0f} ms, errors {out['errors']:.0f}; "
          f"cores: replicas {cores['replicas']:.2f}, postgres {cores['postgres']:.2f}, other "
          f"{cores['other']:.2f}; per table: lock wait {mean('wait db'):.1f} ms, held "
          f"{mean('held'):.1f} ms", flush=True)  # fmt: skip


def _stop(processes: Any) -> None:
    """Stop replica processes and close their output."""
    for process in processes:
        process.terminate()
        process.wait(timeout=60)
        assert process.stdout is not None
        process.stdout.close()
