"""The sliver guard's key sketches: from warm bucket cubes against a query per table (issue 31).

Every table the guard checks needs the counts of its cells' records per
bucket of the record key (``key_buckets``). The cube cache derives them from
a bucket cube (the table's cube with the key's bucket as one more column);
without it they are one more query over the records. This script serves the
demo survey as bench_server.py does, builds the first 200 of its 2-way
requests (which builds their cubes), then times the sketches of 100 of them
from the warm cubes and, in the same process, from the query the cube cache
replaces (the baseline): medians and their ratio, and the cubes' memory.

Usage: python benchmarks/bench_sketch.py [--records 100000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench_server import DATA, requests_pool, site_file
from tablesafe._settings import load_site_config
from tablesafe.engines import CubeCache
from tablesafe.engines._sketch import key_buckets
from tablesafe.prepare._demo import write_demo_data
from tablesafe.rules._guard import BUCKETS
from tablesafe.server import TableBody, TableService


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    data_dir = DATA / f"demo_{args.records}"
    if not (data_dir / "catalog.toml").exists():
        write_demo_data(data_dir, args.records, seed=1, replicates=0)
    with tempfile.TemporaryDirectory() as tmp:
        service = TableService(load_site_config(site_file(Path(tmp), data_dir.resolve())))
        served = service.served("demo")
        cube = served.builder.engine
        assert isinstance(cube, CubeCache)
        plans = []
        for body in requests_pool()[:200]:
            request = served.builder.check(TableBody(**body).to_request())
            built = served.builder.run(request, checked=True, universe_rule=False)
            grouping_sets = built.aggregates.grouping_sets
            plans.append(replace(built.plan, grouping_sets=grouping_sets, magnitudes=()))
        for plan in plans:  # every bucket cube built
            key_buckets(cube, served.dataset, plan, BUCKETS)
        times: dict[str, list[float]] = {"cubes": [], "query": []}
        for name, engine in (("cubes", cube), ("query", cube.engine)):
            for plan in plans[:100]:
                t0 = time.perf_counter()
                key_buckets(engine, served.dataset, plan, BUCKETS)
                times[name].append(time.perf_counter() - t0)
        mib = sum(c.nbytes for c in cube._cubes.values()) / 2**20
        cubes = len(cube._cubes)
        service.close()
    med = {k: 1000 * statistics.median(v) for k, v in times.items()}
    print(f"records {args.records:,}; key sketches of 100 2-way tables, medians")
    print(f"from warm bucket cubes {med['cubes']:.2f} ms, query per table {med['query']:.2f} ms, "
          f"ratio {med['query'] / med['cubes']:.1f}")  # fmt: skip
    print(f"{cubes} cubes (count and bucket) of 200 tables: {mib:.1f} MiB")


if __name__ == "__main__":
    main()
