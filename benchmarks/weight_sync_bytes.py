"""What one weight sync moves at a real model size: the bytes written (or broadcast) per sync, and the time to write
them, for the policy's state_dict as it was sent before 2026-11-29 (every name in the trainer's dtype: fp32 master
weights, a tied embedding twice) and as it is sent now (`untied`, `ServingCast` to the replicas' dtype).

    .venv/bin/python benchmarks/weight_sync_bytes.py [--shape qwen2.5-0.5b] [--vocab 151936] [--dtype bfloat16]
    .venv/bin/python benchmarks/weight_sync_bytes.py --pairs 3 [--dir /dev/shm]    # also time the writes

The model has random weights of the named shape (benchmarks/_common.py SHAPES) in fp32, as mixed precision keeps
its master weights. With `--pairs N` both forms are written N times each through `WeightFiles.write` (the disk
sync's own writer), after one untimed write of each, alternated A B A B ..., and the median of the pair ratios
now/before is printed. The time is the trainer's side only: the cast now made there is no longer made by each
replica as it loads (a bf16 replica converted the fp32 file itself).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import shaped_qwen2  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-0.5b")
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen2.5's vocabulary (the tied matrix's rows)")
    parser.add_argument("--dtype", default="bfloat16", help="the replicas' dtype")
    parser.add_argument("--pairs", type=int, default=0, help="also time N writes of each form, alternated")
    parser.add_argument("--dir", default=None, help="where to write (default: /dev/shm, as the disk sync)")
    args = parser.parse_args()

    import torch

    from rlrm.inference.weight_files import ServingCast, WeightFiles

    torch.set_num_threads(1)
    model = shaped_qwen2(args.shape, args.vocab)
    state = model.state_dict()
    keep = tuple(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    cast = ServingCast(args.dtype, keep, tied_once=True)  # rlrm's own replicas; vLLM and SGLang get the tie twice
    before = sum(v.numel() * v.element_size() for v in state.values())
    now = sum(v.numel() * cast.target(k, v).itemsize for k, v in cast.names(state).items())
    both = sum(v.numel() * cast.target(k, v).itemsize for k, v in state.items())
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.shape} (vocab {args.vocab}): {params / 1e6:.0f} M parameters, replicas in {args.dtype}")
    print(f"bytes a sync moves: before {before / 2**30:.3f} GiB, now {now / 2**30:.3f} GiB: {now / before:.3f}x")
    print(f"  (to vLLM or SGLang replicas, the tie sent twice: {both / 2**30:.3f} GiB: {both / before:.3f}x)")
    if not args.pairs:
        return
    # "before": every name its own fp32 tensor (the old writer cloned the tied one); "now": the writer as it is
    every_name = {k: v.clone() for k, v in state.items()}
    files = WeightFiles(args.dir)
    ratios, version = [], 0
    try:
        for form, kwargs in ((every_name, {}), (state, {"cast": cast})):  # warm-up: the pages of the folder, the cast
            version += 1
            files.keep_only(files.write(form, version, **kwargs))
        for _ in range(args.pairs):
            seconds = []
            for form, kwargs in ((every_name, {}), (state, {"cast": cast})):
                version += 1
                started = time.perf_counter()
                path = files.write(form, version, **kwargs)
                seconds.append(time.perf_counter() - started)
                files.keep_only(path)
            ratios.append(seconds[1] / seconds[0])
            print(f"pair: before {seconds[0]:.2f} s, now {seconds[1]:.2f} s: {ratios[-1]:.3f}x")
    finally:
        files.close()
    print(f"write time now/before, median of {len(ratios)} pairs: {statistics.median(ratios):.3f}x")


if __name__ == "__main__":
    main()
