"""A hardware-aware rule policy: the fallback when no model is available, and the baseline a model must beat.

The rules encode what the project measured on the H200 (docs/measurements.md) and the usual
expert order of the MTMC paper: restructure the work first (tensor cores, fusion, one pass
instead of several), then tile, then pipeline, then tune warps and launch order.
"""

from __future__ import annotations

import math

from ..actions.base import Candidate
from ..hardware import GpuProfile
from .base import Policy, PolicyState, Ranked, sort_ranked
from .features import KernelFeatures

# Action names (or fragments) that turn a multi-pass reduction into a single pass.
SINGLE_PASS_HINTS = ("single_pass", "one_pass", "onepass", "online", "whole_row", "single_block")

# Parameter names that are tile sizes per dimension, and the one for 1-D kernels.
TILE_DIMS = {"BLOCK_M": "m", "BLOCK_N": "n", "BLOCK_K": "k", "BLOCK_SIZE_M": "m", "BLOCK_SIZE_N": "n", "BLOCK_SIZE_K": "k"}
BLOCK_1D = ("BLOCK_SIZE", "BLOCK", "XBLOCK", "BLOCK_N", "BLOCK_COLS")


def preferred_tile(target: GpuProfile) -> dict[str, int]:
    """The matmul tile that fits the target: 128x256x64 (8 warps) on Hopper, smaller below.

    Measured on the H200: 128x256x64 over 8 warps with 3 stages 615 TFLOP/s (620 with grouped
    order; benchmarks/results/h200/actions_gpu.md chain c, docs/measurements.md: 629), 128x128x64 with 3
    stages 537, 128x128x64 over 8 warps with 4 stages 485.
    """
    if target.max_shared_per_block >= 200 * 1024:
        return {"m": 128, "n": 256, "k": 64}
    if target.max_shared_per_block >= 160 * 1024:
        return {"m": 128, "n": 128, "k": 32}
    if target.has("cp.async"):
        return {"m": 128, "n": 64, "k": 32}
    return {"m": 64, "n": 64, "k": 32}


def preferred_stages(target: GpuProfile) -> int:
    """Software pipelining depth: 3 stages on cp.async/TMA targets; Volta gains little.

    Measured on the H200 (benchmarks/results/h200/actions_gpu.md, 4096^3 fp16, 128x128x64 over 8
    warps): 3 stages 615 TFLOP/s, 4 stages 485 TFLOP/s.
    """
    if target.has("cp.async") or target.has("tma"):
        return 3
    return 1


def preferred_block_1d(target: GpuProfile) -> int:
    """Elements per program for streaming kernels: BLOCK 4096 reached 4,388 GB/s on the H200, 128 only 1,690."""
    if target.memory_bandwidth_gbs >= 3000:
        return 4096
    if target.memory_bandwidth_gbs >= 1500:
        return 2048
    return 1024


class HeuristicPolicy(Policy):
    """Scores each candidate in [0, 1] from the kernel's features, the target's hardware and the history."""

    name = "heuristic"

    def __init__(self, reason: str = ""):
        # Why this policy is in use when another one was asked for ("llama_cpp is not installed").
        self.fallback_reason = reason

    def describe(self) -> str:
        text = "heuristic policy (hardware-aware rules, no model)"
        return f"{text}; fallback because {self.fallback_reason}" if self.fallback_reason else text

    def rank(self, state: PolicyState, candidates: list[Candidate]) -> list[Ranked]:
        ranked = []
        for candidate in candidates:
            score, reason = self.score(state, candidate)
            ranked.append(Ranked(candidate, score, None, reason, {"policy": self.name}))
        return sort_ranked(ranked)

    def score(self, state: PolicyState, candidate: Candidate) -> tuple[float, str]:
        """The candidate's score and a one-line reason."""
        f = state.features
        target = state.target
        base, reason = self._prior(f, target, candidate, state)
        fit, fit_reason = self._param_fit(f, target, candidate, state)
        score = base * fit
        reasons = [reason] + ([fit_reason] if fit_reason else [])
        penalty, why = _history_penalty(state, candidate)
        if penalty:
            score *= penalty
            reasons.append(why)
        return round(score, 4), "; ".join(reasons)

    def _prior(self, f: KernelFeatures, target: GpuProfile, c: Candidate,
               state: PolicyState | None = None) -> tuple[float, str]:
        """How much this kind of action is worth for this kind of kernel on this GPU."""
        name = c.action.lower()
        multi_pass = f.data_passes > 1 and f.reduction_passes > 0
        if any(h in name for h in SINGLE_PASS_HINTS):
            # One read of a row held in registers beats the online form (two reads: stats, then
            # normalise), so single_pass ranks first where both apply.
            online = "online" in name
            if multi_pass:
                return (0.93 if online else 0.95), f"one pass instead of {f.data_passes} over the data"
            return 0.5, "single pass (the kernel already reads once)"
        if name == "column_block":
            # One strided column per program reached 19% of the H200's memory floor (col_sum).
            return 0.9, "coalesced column tiles instead of one strided column per program"
        if name == "channel_tile":
            return channel_tile_prior(f)
        if name == "rows_per_program":
            return rows_per_program_prior(f, _row_facts(state))
        if name == "row_grid":
            # The flat index's per-element division by a run-time width and its per-row gathers go; tiling can still
            # retune the column block after it, so it ranks just above tiling. Not measured on a GPU yet.
            return 0.88, "rows on a grid axis: no division per element"
        if name == "split_k":
            # Pays only when the M x N tiles are fewer than the SMs (a skinny or decode-time GEMM),
            # which the file's text does not say: below tiling and pipelining, above launch knobs.
            return 0.5, "split the K loop when M x N tiles cannot fill the SMs"
        if name == "vectorize":
            # One element per program: the GPU schedules a program per value. A block per program is the first thing
            # to do. Not measured on a GPU yet.
            return 0.99, "a block of elements per program instead of one"
        if name == "batch_launches":
            # A host loop of launches pays a launch and a drained grid per iteration; one grid over every slice is the
            # same work with none of that. Not measured on a GPU yet.
            return 0.97, "one launch for the whole host loop"
        if name == "row_partials":
            # A per-row fp32 workspace as large as the input is written and read back whole; summing a run of rows
            # in registers first cuts that traffic by the run's length. Above split_reduction, which only spreads
            # the column sum's reading of it. Not measured on a GPU yet.
            return 0.92, "sum a run of rows per program before writing the partials"
        if name == "split_reduction":
            # A column reduction (bias or norm weight gradients) runs one program per column block and walks every
            # row: on a tall matrix that is a few dozen programs. The text does not say the sizes: above launch knobs,
            # below the rewrites that cut traffic.
            return 0.8, "split the reduction loop when the grid has fewer programs than SMs"
        if name == "split_kv":
            # Offered only on an online-softmax loop with a vector accumulator per program: decode attention,
            # whose (sequence, head) grid is often fewer programs than SMs. Not measured on a GPU yet.
            return 0.8, "split the key loop over more programs, then merge (flash decoding)"
        if name == "mask_free_k":
            return mask_free_k_prior(state, c)
        if name == "flash_attention":
            # An attention chain writes and reads the seq x seq scores (and probabilities) once per
            # kernel; one flash kernel keeps them in registers and drops two launches: first. H200,
            # session 5: 2.9-12.9x over the chain with 64x64 tiles (the step now sets such tiles), but
            # 0.69-2.8x with the chain's 16x16 ones.
            if "tile" in c.params:  # the small-tile variant: for short sequences, after the target's tiles
                return 0.9, f"one flash kernel with {c.params['tile']}x{c.params['tile']} tiles (more programs for short sequences)"
            return 0.99, "one flash kernel: the seq x seq scores never reach memory"
        if name == "fast_exp":
            # One exponent per score beside tl.dot: on the H200 flash kernel (4x16x4096x128 fp16) base 2 ran
            # 1.31x faster than tl.exp at the same tiles. Below retiling and pipelining, which pay more first.
            return 0.8, "the loop's exponents in base 2 (flush-to-zero ex2)"
        if name == "tensor_descriptor":
            return tensor_descriptor_prior(state, target)
        if name == "persistent":
            return persistent_prior(state, c, target)
        if name == "prologue":
            # The producer's work moves into the consumer's loads: its buffer's write and read and a launch go, but
            # a consumer that loads each element several times (a matmul's weight, once per row block) computes it
            # that often. Below fusions that only remove memory traffic. Not measured on a GPU yet.
            return 0.85, "computes the producer in the consumer's loads (one buffer and a launch fewer)"
        if name == "fuse_calls":
            # Offered only once the producer wrapper's result is proven to feed the consumer wrapper's
            # kernel: the same buffer and launch fusion removes when both launches share a host function.
            return 0.93, "removes the intermediate buffer and a launch across two wrapper calls"
        kind = c.kind
        if kind == "TensorCore":
            return 0.97, "tensor cores through tl.dot"
        if kind == "Fusion":
            if f.intermediate_consumers:
                return 0.93, "removes the intermediate buffer and a launch"
            return 0.6, "fusion saves a round trip through memory"
        if kind == "Tiling":
            if f.dot_in_loop:
                return 0.9, f"bigger tiles for tl.dot on {target.name}"
            if f.elementwise_1d:
                return 0.85, "bigger blocks for a memory-bound kernel"
            if multi_pass:
                return 0.8, "a block that covers the row saves passes"
            return 0.6, "retiling"
        if kind == "Pipelining":
            if f.dot_in_loop and (target.has("cp.async") or target.has("tma")):
                return 0.85, f"async copies pipeline the K loop on {target.name}"
            if f.loops:
                return 0.45 if target.has("cp.async") else 0.2, "pipelining a loop"
            return 0.1, "no loop to pipeline"
        if kind == "Reordering":
            # Contiguity hints share the kind but not the L2 effect: measured 0.94-1.01x on matmuls.
            if f.uses_dot and (f.grid_dims or 2) >= 2 and name != "contiguity":
                return 0.7, "grouped program order for L2 reuse"
            return 0.35, "memory access order hints"
        if kind == "Autotune":
            if f.autotuned:
                return 0.05, "already autotuned"
            return 0.6, f"autotune configs pruned for {target.name}"
        if kind == "Hoist":
            return 0.55, "loop-invariant work out of the loop"
        if kind == "Warps":
            return 0.5, "warps per program"
        if kind == "Precision":
            return 0.4, "changes numerics"
        return 0.3, f"{kind.lower()} step"

    def _param_fit(self, f: KernelFeatures, target: GpuProfile, c: Candidate,
                   state: PolicyState | None = None) -> tuple[float, str]:
        """A factor in (0, 1]: how close the parameters are to what fits the target."""
        params = {k: v for k, v in c.params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if c.action == "column_block":
            return 1.0, ""  # its tiles are sized by the action, listed best first
        if c.action == "rows_per_program":
            # H200: 8192-element tiles won where programs loop over a row or take columns (red_col_max 6.1x
            # vs 3.9x, red_row_sum 6.6x vs 5.4x); one block per row did as well or better at 4096 (512
            # columns: 1.03x vs 0.94x). Bigger tiles only where more bytes are in flight.
            facts = _row_facts(state)
            streaming = facts is not None and (facts.loops or facts.axis == "col")
            want = 8192 if target.memory_bandwidth_gbs >= 3000 and streaming else 4096
            return (1.0 if c.params.get("TILE") == want else 0.9), f"tiles of about {want} elements"
        if c.kind == "Tiling":
            dims = {TILE_DIMS[k]: v for k, v in params.items() if k in TILE_DIMS and v > 0}
            if dims and f.uses_dot:
                pref = preferred_tile(target)
                distance = sum(abs(math.log2(v) - math.log2(pref[d])) for d, v in dims.items())
                return 1.0 / (1.0 + 0.35 * distance), "tile " + "x".join(str(pref[d]) for d in ("m", "n", "k"))
            blocks = [v for k, v in params.items() if k in BLOCK_1D and v > 0]
            if blocks:
                pref = preferred_block_1d(target)
                distance = abs(math.log2(blocks[0]) - math.log2(pref))
                return 1.0 / (1.0 + 0.25 * distance), f"block near {pref}"
        if c.kind == "Pipelining" and "num_stages" in params:
            distance = abs(params["num_stages"] - preferred_stages(target))
            return 1.0 / (1.0 + 0.5 * distance), f"{preferred_stages(target)} stages fit"
        if c.kind == "Warps" and "num_warps" in params:
            tile = 1
            for k, v in f.constexprs.items():
                if k in TILE_DIMS and isinstance(v, int):
                    tile *= v
            wanted = 8 if tile >= 128 * 128 else 4
            distance = abs(math.log2(max(params["num_warps"], 1)) - math.log2(wanted))
            return 1.0 / (1.0 + 0.5 * distance), f"{wanted} warps for this tile"
        if c.action == "split_k":
            return (1.0 if c.params.get("SPLIT_K") == 4 else 0.9), "4 splits"
        if c.action == "split_kv":
            return (1.0 if c.params.get("NUM_SPLITS") == 8 else 0.9), "8 splits"
        if c.action == "split_reduction":
            return (1.0 if c.params.get("SPLIT") == 8 else 0.9), "8 splits"
        if c.action == "row_partials":
            return (1.0 if c.params.get("ROWS_PER_PROGRAM") == 16 else 0.9), "16 rows a program"
        if c.kind == "Reordering" and "GROUP_M" in params:
            distance = abs(math.log2(max(params["GROUP_M"], 1)) - 3)
            return 1.0 / (1.0 + 0.3 * distance), "group of 8"
        return 1.0, ""


def _row_facts(state: PolicyState | None):
    """rows_per_program's facts about the state's kernel (None without a state or when it is not offered)."""
    if state is None:
        return None
    # Imported here: only rows_per_program candidates need it.
    from ..actions.rows_per_program import row_facts

    return row_facts(state.analysis, state.kernel)


def rows_per_program_prior(f: KernelFeatures, facts) -> tuple[float, str]:
    """rows_per_program's prior from what its gain depended on when timed on the H200
    (benchmarks/results/h200/rows_per_program.md, session 5): high for columns and narrow rows, low for
    wide rows, below single_pass where a kernel still walks its rows in several passes."""
    if f.data_passes > 1:
        # Alone on the layernorm tutorial (3 passes) 0.80x, on a 3-pass log_softmax a compile failure;
        # single_pass there 1.5-2.3x, and after it this step adds at most 1.4x.
        return 0.45, "one pass over the rows first (single_pass), then several rows per program"
    if facts is not None and facts.persistent:
        # A grid-stride kernel already sizes its grid to the GPU and walks many rows a program: several rows a trip
        # measured 0.75-0.80x on the persistent softmax (H200, session 7, dev sm_softmax_persistent).
        return 0.35, "several rows per trip of a persistent kernel's row loop (0.75-0.80x measured on a persistent softmax)"
    if facts is not None and facts.axis == "col":
        # Below column_block (0.9) where both are offered: on col_sum (32768 x 4096, H200, session 7) this step
        # kept 8-column tiles for the grid's sake (32-byte row segments) and gave 3.1x, column_block 7.5x.
        return 0.88, "several columns per program: coalesced [rows, columns] tiles (3.1-6.7x measured)"
    block = facts.block if facts is not None else None
    reduces = facts is None or facts.reduces
    several_axes = facts is not None and facts.grid_dims > 1
    if block is None and (reduces or several_axes):
        # One run-time-wide block per row: 1.8x at 128 columns, 1.2-1.3x at 256-512 for some kernels,
        # 0.94-1.03x at 512 and wider (most LLM hidden sizes); the width is not in the text. On a grid of
        # several axes the row is a slice the other axes split off (a token's head, a sample's channel).
        score, why = 0.6, "several rows per program: pays for narrow rows (the row width is known only at run time)"
    elif block is None:
        # A whole elementwise row (no reduction whose latency several rows share) of run-time width, the
        # only axis of the grid: in the wild mostly an LLM hidden or intermediate size, which fills a program.
        score, why = 0.5, "several elementwise rows per program: pays only for narrow rows (the width is known at run time)"
    elif block <= 256:
        # Narrow rows, or rows walked in small blocks: 1.8x (128 columns) to 5-6.6x (64-wide blocks).
        score, why = 0.9, f"several {block}-wide rows per program in 2-D tiles"
    elif block <= 512:
        score, why = 0.65, f"several {block}-wide rows per program (1.0-1.3x measured at 512)"
    elif reduces:
        score, why = 0.3, f"{block}-wide rows already fill a program (0.97-1.08x measured at 1024-2048)"
    else:
        # Reductions of this width measured 0.97-1.08x; an elementwise row has no reduction to share,
        # so it gains at most as much, and the bigger tile only costs registers.
        score, why = 0.2, f"{block}-wide elementwise rows already fill a program"
    if several_axes:
        why += f" (rows on one axis of a {facts.grid_dims}-axis grid)"
    return score, why


def channel_tile_prior(f: KernelFeatures) -> tuple[float, str]:
    """channel_tile's prior: a loop that loads one position vector per channel becomes one [channels, positions]
    tile, and a second pass over the channels reuses it. Not timed on a GPU yet: first where it drops a pass
    (as single_pass, whose 1.5-2.3x it mirrors), else above retiling (all channel loads in flight at once)."""
    if f.data_passes > 1:
        return 0.96, f"one tile read instead of {f.data_passes} passes over the channels"
    return 0.82, "all channels loaded as one tile instead of one vector per loop iteration"


def mask_free_k_prior(state: PolicyState | None, candidate: Candidate) -> tuple[float, str]:
    """mask_free_k's prior: after tiling and pipelining (tiling refuses the unmasked loads it writes), below grouped
    order alone. The hand-written sweep (benchmarks/results/h200/suite_tiles/) had grouped order with the masks out
    of the loop 1.04-1.17x over the masked loop, but the engine's own edits of the suite matmuls, tiled 128x256x64 in
    3 stages (benchmarks/results/h200/tensor_descriptor/), gave the grouped mask_free_k step 0.93-1.02x over the
    pointer loads where reordering's grouped order alone gave 0.96-1.12x, and unmasking under grouped order
    0.91-1.00x of grouped order: tried after reordering, and last once grouped order is in."""
    grouped = state is not None and any("GROUP" in name.upper() for name in state.kernel.constexpr_names)
    if grouped:
        return 0.5, "unmasked K loop under grouped order (0.91-1.00x measured on the engine's H200 matmuls)"
    if candidate.params.get("GROUP_M"):
        return 0.66, "grouped order and an unmasked K loop in one step (0.93-1.02x measured on the engine's matmuls)"
    return 0.62, "unmasked K loop without grouped order (about 1.0x measured)"


def _tiled_and_staged(state: PolicyState | None) -> int:
    """How many of tiling and pipelining (0-2) the kernel's kept steps include: the large, staged tiles TMA loads
    and persistent tiles were measured at."""
    if state is None:
        return 0
    kept = {step.candidate.kind for step in state.history if step.kept}
    # A tile chosen with its stages (tiling raising a launch's num_stages=1) is both.
    kept |= {"Pipelining" for step in state.history if step.kept and step.candidate.kind == "Tiling"
             and "num_stages" in step.candidate.params}
    return len(kept & {"Tiling", "Pipelining"})


def _kept_action(state: PolicyState | None, action: str) -> bool:
    return state is not None and any(step.kept and step.candidate.action == action for step in state.history)


def tensor_descriptor_prior(state: PolicyState | None, target: GpuProfile) -> tuple[float, str]:
    """tensor_descriptor's prior: sm_90+ only, after tiling and pipelining (TMA pays at the large, staged tiles they
    set: H200, fp16 8192^3 matmul, a hand-written descriptor kernel 1.12x over pointer loads, suite_tiles_gpu.py),
    after grouped order (reordering, 0.7) and below mask_free_k's fresh steps (0.62-0.66; each refuses the other's
    loop), above the unmasked loop under grouped order (0.5). Its own edits on the suite matmuls (benchmarks/results/h200/tensor_descriptor/): 0.92x, 1.06x, 1.03x
    and 1.00x over the pointer loads (matmul, transposed B, linear+GELU, bmm), 0.97-1.03x after grouped order."""
    if target.arch < 90:
        return 0.0, f"no TMA on {target.name}"
    if _kept_action(state, "persistent"):
        return 0.9, ("TMA loads in the persistent tile loop (with persistent tiles 1.13-1.27x over grouped order on "
                     "the H200's matmuls, where either alone ran 0.91-1.06x)")
    staged = _tiled_and_staged(state)
    if staged == 2:
        return 0.6, "TMA descriptor loads of the retiled, pipelined K loop (1.12x by hand on an H200 matmul)"
    if staged == 1:
        return 0.55, "TMA descriptor loads of the K loop (1.12x by hand on an H200 matmul); tiling or pipelining first"
    return 0.5, "TMA descriptor loads of the K loop; they pay after tiling and pipelining"


def persistent_prior(state: PolicyState | None, candidate: Candidate, target: GpuProfile) -> tuple[float, str]:
    """persistent's prior: above tensor_descriptor and mask_free_k once tiled and staged, below a retile. The engine's
    own edits on the H200 (benchmarks/results/h200/persistent/, after tiling, 3 stages and grouped order): 1.21x and
    1.16x over pointer loads with B stored (N, K) (matmul_transposed, linear_gelu), 0.91x on the square matmul; with
    descriptors 1.27x, 1.22x and 1.13x (persistent_ablation/: 1.03x of cuBLAS on both plain matmuls). The two pay
    together (``pays_with``): persistent first, its TMA loads next at 0.9 (tensor_descriptor_prior), or the reverse.
    Flattening the two loops was slower or even (0.45x on the square matmul with pointer loads): below."""
    if target.arch < 90:
        return 0.3, f"persistent tiles on {target.name}: not measured before Hopper"
    if _kept_action(state, "tensor_descriptor") and not candidate.params.get("flatten"):
        return 0.9, "one program per SM walks the tiles with their TMA loads (1.13-1.27x together on the H200's matmuls)"
    # Measured at the large, staged tiles tiling and pipelining set; tensor_descriptor's prior steps the same way.
    # Staged, above mask_free_k's fresh steps (0.62-0.66), which refuse the TMA loads persistent tiles pay with.
    base = (0.52, 0.58, 0.68)[_tiled_and_staged(state)]
    if candidate.params.get("flatten"):
        return base - 0.07, "one program per SM walks the tiles, loops flattened (slower than unflattened on the H200's matmuls)"
    return base, "one program per SM walks the tiles (1.16-1.27x on the H200's transposed-B matmuls)"


def _history_penalty(state: PolicyState, candidate: Candidate) -> tuple[float, str]:
    """Down-weight actions whose kind already failed, or was just done, on this kernel."""
    factor, why = 1.0, ""
    for step in state.history:
        if step.candidate.key() == candidate.key():
            return 0.05, "already tried"
        # num_stages and mask_free_k share the Pipelining kind, not the idea: one does not demote the other.
        # Neither do grouped order and persistent tiles (both Reordering).
        other_idea = step.candidate.action != candidate.action and bool(
            {"mask_free_k", "persistent"} & {step.candidate.action, candidate.action})
        if step.candidate.kind != candidate.kind or other_idea:
            continue
        if step.correct is False or step.compiled is False:
            factor, why = min(factor, 0.5), f"a {candidate.kind.lower()} step failed before"
        elif step.kept and candidate.kind != "Fusion":
            # Another fusion removes another buffer and launch: as valuable as the first one.
            factor, why = min(factor, 0.7), f"a {candidate.kind.lower()} step was already kept"
    return (factor, why) if factor < 1.0 else (0.0, "")
