#!/usr/bin/python3
"""Data-parallel scaling on CPU ranks, tandem against PyTorch 1.13's DistributedDataParallel.

Each repeat trains ResNet-20 on random in-memory batches (per-rank batch fixed, one thread per
rank) at every world size 1..N in tandem (build/benchmarks/bench_scaling: ranks are threads, the
local backend, DistributedDataParallel) and in PyTorch (one process per rank, the gloo backend,
torch.nn.parallel.DistributedDataParallel), plus tandem at world 1 without the DDP wrapper (what
DDP costs at world 1), and the machine's own ceiling: N independent one-rank tandem processes
without DDP at once (no communication at all), whose summed img/s over N x one alone is the
efficiency no data-parallel library can beat on this machine. Runs alternate so both see the same machine load; medians are quoted.
Scaling efficiency at N = img/s at N / (N x img/s at 1). tandem's step time is also split into
compute and exposed communication (the wait for the allreduce after backward's last op).

  /usr/bin/python3 benchmarks/bench_scaling.py --max-world 2 --repeats 3 \
      --out docs/bench/scaling.json --plot docs/bench/scaling.png
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_rank(rank, world, port, args, queue):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
    from make_model_golden import CifarResNet

    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(
        CifarResNet(int(args.model.replace("resnet", "")), in_channels=1))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.SGD([{"params": decay, "weight_decay": 5e-4},
                           {"params": no_decay, "weight_decay": 0.0}],
                          lr=0.05, momentum=0.9, nesterov=True)
    xs = [torch.randn(args.batch, 1, 28, 28) for _ in range(4)]
    ys = [torch.randint(0, 10, (args.batch,)) for _ in range(4)]
    ms = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(xs[s % 4]), ys[s % 4]).backward()
        opt.step()
        if s >= args.warmup:
            ms.append((time.perf_counter() - t0) * 1000)
    dist.destroy_process_group()
    if rank == 0:
        queue.put(statistics.median(ms))


def torch_run(world, args):
    """PyTorch DDP at `world` processes; returns the JSON record tandem's driver prints."""
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=torch_rank, args=(r, world, port, args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    step = queue.get(timeout=900)
    for p in procs:
        p.join()
    import torch
    return {"framework": "pytorch", "version": torch.__version__, "world": world,
            "step_ms_median": step, "img_per_s": world * args.batch * 1000 / step}


def tandem_run(world, args, ddp=True):
    cmd = [args.binary, "--ranks", str(world), "--batch", str(args.batch), "--threads",
           str(args.threads), "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--model", args.model]
    if not ddp:
        cmd.append("--no-ddp")
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def tandem_independent(world, args):
    """`world` one-rank tandem processes without DDP at once: the machine's ceiling at `world`."""
    cmd = [args.binary, "--ranks", "1", "--batch", str(args.batch), "--threads", str(args.threads),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model, "--no-ddp"]
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env) for _ in range(world)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"an independent run failed: {cmd}")
    runs = [json.loads(o.strip().splitlines()[-1]) for o in outs]
    # Ranks in lockstep would wait for the slowest each step: the median over steps of the
    # slowest process's time for that step (the processes run their steps side by side).
    steps = [r["rank_step_ms"][0] for r in runs]
    return {"world": world, "img_per_s": sum(r["img_per_s"] for r in runs),
            "step_ms_median": statistics.median(r["step_ms_median"] for r in runs),
            "lockstep_step_ms_median": statistics.median(max(s) for s in zip(*steps))}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet20", choices=["resnet20", "resnet32", "resnet44", "resnet56"])
    p.add_argument("--batch", type=int, default=64, help="images per rank per step")
    p.add_argument("--threads", type=int, default=1, help="threads per rank")
    p.add_argument("--max-world", type=int, default=2)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "bench_scaling"))
    p.add_argument("--out", help="JSON file to write")
    p.add_argument("--plot", help="PNG: img/s and efficiency per world size (python3-matplotlib)")
    args = p.parse_args()

    worlds = list(range(1, args.max_world + 1))
    runs = []
    start = time.time()
    total = args.repeats * (3 * len(worlds))
    done = 0
    for r in range(args.repeats):
        rep = {"tandem": {}, "pytorch": {}, "independent": {}}
        for w in worlds:
            rep["independent"][w] = tandem_independent(w, args)
            rep["tandem"][w] = tandem_run(w, args)
            rep["pytorch"][w] = torch_run(w, args)
            done += 3
            elapsed = time.time() - start
            print(f"[{done}/{total}] repeat {r + 1}, world {w}: tandem "
                  f"{rep['tandem'][w]['img_per_s']:.0f} img/s, PyTorch "
                  f"{rep['pytorch'][w]['img_per_s']:.0f} img/s, no communication "
                  f"{rep['independent'][w]['img_per_s']:.0f} img/s | {elapsed:.0f} s, ETA "
                  f"{elapsed / done * (total - done):.0f} s", file=sys.stderr)
        runs.append(rep)

    def med(f):
        return statistics.median(f(rep) for rep in runs)

    summary = {"model": args.model, "batch_per_rank": args.batch, "threads_per_rank": args.threads,
               "steps": args.steps, "repeats": args.repeats, "worlds": worlds,
               "pytorch_version": runs[0]["pytorch"][1]["version"], "per_world": {}}
    summary["tandem_no_ddp_img_per_s"] = med(lambda rep: rep["independent"][1]["img_per_s"])
    summary["ddp_cost_at_world_1"] = med(
        lambda rep: 1 - rep["tandem"][1]["img_per_s"] / rep["independent"][1]["img_per_s"])
    for w in worlds:
        row = {}
        for fw in ("tandem", "pytorch"):
            row[fw + "_img_per_s"] = med(lambda rep: rep[fw][w]["img_per_s"])
            row[fw + "_efficiency"] = med(
                lambda rep: rep[fw][w]["img_per_s"] / (w * rep[fw][1]["img_per_s"]))
        row["ceiling_efficiency"] = med(
            lambda rep: rep["independent"][w]["img_per_s"] / (w * rep["independent"][1]["img_per_s"]))
        row["tandem_vs_pytorch"] = med(
            lambda rep: rep["tandem"][w]["img_per_s"] / rep["pytorch"][w]["img_per_s"])
        for key in ("step_ms_median", "compute_ms_median", "exposed_comm_ms_median"):
            row["tandem_" + key] = med(lambda rep: rep["tandem"][w][key])
        row["pytorch_step_ms_median"] = med(lambda rep: rep["pytorch"][w]["step_ms_median"])
        summary["per_world"][w] = row
    print(json.dumps(summary, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(summary, runs=runs), f, indent=1)
    if args.plot:
        plot(summary, args.plot)


def plot(summary, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    worlds = summary["worlds"]
    rows = [summary["per_world"][w] for w in worlds]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.8))
    for fw, color, name in (("tandem", "tab:blue", "tandem"),
                            ("pytorch", "tab:orange", "PyTorch " + summary["pytorch_version"] + " DDP (gloo)")):
        a.plot(worlds, [r[fw + "_img_per_s"] for r in rows], "o-", color=color, label=name)
        b.plot(worlds, [100 * r[fw + "_efficiency"] for r in rows], "o-", color=color, label=name)
    a.plot(worlds, [w * rows[0]["tandem_img_per_s"] for w in worlds], ":", color="gray", label="linear")
    b.plot(worlds, [100 * r["ceiling_efficiency"] for r in rows], "s--", color="gray",
           label="ceiling: independent processes, no communication")
    a.set(xlabel="world size (CPU ranks, 1 thread each)", ylabel="img/s", title="throughput")
    b.set(xlabel="world size", ylabel="%", title="scaling efficiency", ylim=(0, 110))
    comp = [r["tandem_compute_ms_median"] for r in rows]
    comm = [r["tandem_exposed_comm_ms_median"] for r in rows]
    c.bar(worlds, comp, color="tab:blue", label="compute")
    c.bar(worlds, comm, bottom=comp, color="tab:red", label="exposed communication")
    c.set(xlabel="world size", ylabel="ms per step", title="tandem step time")
    for ax in (a, b, c):
        ax.set_xticks(worlds)
        ax.legend(loc="lower left" if ax is not c else "lower right", fontsize=8)
    fig.suptitle(f"{summary['model']}, batch {summary['batch_per_rank']} per rank")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
