"""torchao Float8Linear training (--float8): what each converted linear saves and the transients of its casts.

Sources: torchao==0.18.0 float8/float8_linear.py (matmul_with_hp_or_float8_args), float8/float8_training_tensor.py
(_ToFloat8ConstrFunc), float8/float8_utils.py (tensor_to_amax, to_fp8_saturated), float8/config.py
(Float8LinearConfig.from_recipe_name); torchtitan's converter (pytorch/torchtitan@238fa99
torchtitan/components/quantization/float8.py and utils.py module_filter_fn; docs/float8.md).

- Which linears: torchtitan converts every nn.Linear whose in and out features are multiples of 16
  (module_filter_fn) and not filtered; its configs filter the output head (llama3_8b.toml filter_fqns ["output"];
  at 9dec370 always fqn != "output"). So: a dense decoder layer's q, k, v, o, gate, up, down; never the head.
- Saved for backward: the forward's ctx.save_for_backward(input_hp, weight_hp_t): the high-precision input and the
  weight, as nn.Linear saves them. Eager activations are unchanged.
- Transients (eager): each cast computes amax, then `tensor.to(float32) * scale`, clamps and casts: at its high-water
  mark the fp32 upcast and product (8 B per element), then the clamped copy beside the product and the float8
  result (1 B): CAST_PEAK = 9 B per element, plus 4 B per scale (one per tensor, or per row under rowwise). The
  forward casts the input, then the weight, then multiplies; the backward casts grad_output and the weight for
  grad_input, multiplies, then (not rowwise_with_gw_hp) casts grad_output and the input again for grad_weight while
  the first casts and grad_input are alive. zeroplan adds the largest of these over nn.Linear's own peak (its output;
  grad_input and grad_weight) at each layer's forward and backward event (cast_transients; validation/measure_float8.py).
- Compiled (--compile): inductor fuses each cast into kernels whose only outputs are the float8 tensor and its scale
  (no fp32 copies), so the transient is the float8 operands alive at the matmul: modelled from the source, not
  measured (inductor's CPU buffers are not dispatched ops). What the partitioner saves: compiled_float8_terms.
Pure: no torch, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.errors import ZeroplanError
from zeroplan.memory.setup import Float8Recipe, TrainingSetup
from zeroplan.models.architecture import Architecture

__all__ = ["Float8Recipe", "Transients", "cast_transients", "compiled_transients", "layer_linears", "layer_transients",
           "check_float8", "float8_assumption", "compiled_float8_terms", "check_float8_all_gather", "is_float8_weight"]

FLOAT8_BYTES = 1  # float8_e4m3fn / float8_e5m2
SCALE_BYTES = 4  # fp32 scales (amax_to_scale: res.to(torch.float32))
CAST_PEAK = 9  # fp32 upcast 4 + scaled product 4 + float8 result 1 (float8_training_tensor.py, float8_utils.py)
ALIGNMENT = 16  # torchtitan module_filter_fn: in_features % 16 == 0 and out_features % 16 == 0
FLOAT8_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3"})  # Llama-style dense decoders (measured: llama)
# The compiled block's terms (memory.activations.terms) the partitioner recomputes under float8 instead of saving:
# the normed inputs of q/k/v and of the MLP (from the saved residual and its rstd) and the down projection's input
# (from the saved gate and up). Measured: validation/measure_float8.py, torch 2.13 inductor on CPU. Under
# rowwise_with_gw_hp grad_weight multiplies the high-precision input, and the compiled block saves what bf16's does.
RECOMPUTED_UNDER_FLOAT8 = ("q/k/v projection input", "MLP input", "down projection input")
SOURCE = "torchao==0.18.0:float8/float8_linear.py"


@dataclass(frozen=True, slots=True)
class Transients:
    forward: int  # bytes over nn.Linear's forward peak
    backward: int  # bytes over nn.Linear's backward peak


def _scales(recipe: Float8Recipe, count: int) -> int:
    return SCALE_BYTES * (count if recipe is not Float8Recipe.tensorwise else 1)


def cast_transients(recipe: Float8Recipe, tokens: int, k: int, n: int, e: int) -> Transients:
    """One eager Float8Linear (tokens x k input, n x k weight) over nn.Linear's peaks (module docstring)."""
    tk, nk, tn = tokens * k, n * k, tokens * n
    s_in, s_w = _scales(recipe, tokens), _scales(recipe, n)
    x8, w8 = tk + s_in, nk + s_w
    forward = max(CAST_PEAK * tk + s_in, x8 + CAST_PEAK * nk + s_w, x8 + w8 + e * tn) - e * tn
    go8 = tn + _scales(recipe, tokens)
    wgi = Float8Recipe.tensorwise if recipe is Float8Recipe.rowwise_with_gw_hp else recipe
    wg8 = nk + _scales(wgi, k)
    grad_input = go8 + wg8 + e * tk
    events = [CAST_PEAK * tn + go8 - tn, go8 + CAST_PEAK * nk + wg8 - nk, grad_input]
    if recipe is Float8Recipe.rowwise_with_gw_hp:  # grad_weight from the high-precision tensors
        events.append(grad_input + e * nk)
    else:
        go8_1 = tn + _scales(recipe, n)
        events += [grad_input + CAST_PEAK * tn + go8_1 - tn,
                   grad_input + go8_1 + CAST_PEAK * tk + _scales(recipe, k),
                   grad_input + go8_1 + tk + _scales(recipe, k) + e * nk]
    return Transients(forward, max(events) - (e * tk + e * nk))


def compiled_transients(recipe: Float8Recipe, tokens: int, k: int, n: int) -> Transients:
    """Under inductor: the float8 operands alive at the matmuls, no fp32 copies (modelled from the source)."""
    forward = tokens * k + n * k + _scales(recipe, tokens) + _scales(recipe, n)
    backward = tokens * n + n * k + _scales(recipe, tokens) + _scales(recipe, k)
    if recipe is not Float8Recipe.rowwise_with_gw_hp:
        backward += tokens * n + tokens * k + _scales(recipe, n) + _scales(recipe, k)
    return Transients(forward, backward)


def layer_linears(arch: Architecture) -> list[tuple[str, int, int]]:
    """(name, in, out) of the linears torchtitan converts in one dense decoder layer (multiples of 16 only)."""
    h, q, kv, f = arch.hidden_size, arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim, arch.intermediate_size
    linears = [("q", h, q), ("k", h, kv), ("v", h, kv), ("o", q, h), ("up", h, f), ("down", f, h)]
    if arch.gated_mlp:
        linears.append(("gate", h, f))
    return [(name, k, n) for name, k, n in linears if k % ALIGNMENT == 0 and n % ALIGNMENT == 0]


def layer_transients(arch: Architecture, setup: TrainingSetup, tokens: int, e: int) -> Transients:
    """The largest converted linear's transients at a layer's forward and backward (none without --float8)."""
    if setup.float8 is Float8Recipe.none:
        return Transients(0, 0)
    each = [compiled_transients(setup.float8, tokens, k, n) if setup.compile
            else cast_transients(setup.float8, tokens, k, n, e) for _, k, n in layer_linears(arch)]
    backward = max((t.backward for t in each), default=0)
    return Transients(max((t.forward for t in each), default=0), backward + recomputed_bytes(arch, setup, tokens, e))


def recomputed_bytes(arch: Architecture, setup: TrainingSetup, tokens: int, e: int) -> int:
    """What a compiled float8 block without checkpointing recomputes in its backward instead of saving
    (RECOMPUTED_UNDER_FLOAT8: e T h twice, e T f), alive again there; 0 elsewhere."""
    if not setup.compile or setup.float8 in (Float8Recipe.none, Float8Recipe.rowwise_with_gw_hp):
        return 0
    if setup.checkpointing.value != "none" and not (setup.checkpointing.value == "selective"
                                                     and setup.attention.value == "flash"):
        return 0
    return e * tokens * (2 * arch.hidden_size + arch.intermediate_size)


def check_float8(arch: Architecture, setup: TrainingSetup) -> None:
    """ZeroplanError for a --float8 run zeroplan does not model."""
    if setup.float8 is Float8Recipe.none:
        return
    if arch.family not in FLOAT8_FAMILIES or arch.is_moe or arch.kv_lora_rank or arch.num_encoder_layers:
        raise ZeroplanError(f"--float8: modelled for dense {', '.join(sorted(FLOAT8_FAMILIES))} decoders only "
                            f"(torchtitan's Float8Linear converter), not {arch.family}{' (MoE)' if arch.is_moe else ''}")
    if setup.precision.compute_bytes != 2:
        raise ZeroplanError("--float8: modelled with a 16-bit compute dtype only (torchtitan trains bf16)")


def float8_assumption(setup: TrainingSetup, transients: Transients) -> str:
    where = ("compiled: casts fused by inductor, transients modelled from the source, not measured" if setup.compile
             else "eager: cast transients as measured on CPU")
    gib = 2**30
    return (f"float8: torchao Float8Linear {setup.float8.value} on the blocks' linears (not the head), saves the "
            f"bf16 input and weight ({SOURCE}); {where}: {transients.forward / gib:.2f} GiB inside a layer's forward, "
            f"{transients.backward / gib:.2f} GiB inside its backward; GPU kernels' workspaces not counted")


def compiled_float8_terms(terms: list[tuple[str, int]], arch: Architecture, recipe: Float8Recipe,
                          e: int) -> list[tuple[str, int]]:
    """A compiled block's terms under float8 tensorwise or rowwise: the partitioner recomputes RECOMPUTED_UNDER_FLOAT8
    and keeps, under tensorwise scaling, each converted linear's fp32 scale and e-byte amax; rowwise_with_gw_hp keeps
    the bf16 block's terms (measured: validation/measure_float8.py). The caller applies it without checkpointing
    only; a checkpointed compiled block keeps compile's own sets (memory.activations.compiled; an over-estimate)."""
    if recipe in (Float8Recipe.none, Float8Recipe.rowwise_with_gw_hp):
        return terms
    kept = [(name, value) for name, value in terms if name not in RECOMPUTED_UNDER_FLOAT8]
    if recipe is Float8Recipe.tensorwise:
        kept.append(("float8 scales", len(layer_linears(arch)) * (SCALE_BYTES + e)))
    return kept


def check_float8_all_gather(options, recipe: Float8Recipe) -> None:
    """--float8-all-gather needs --float8 tensorwise: torchao's WeightWithDynamicFloat8CastTensor casts with dynamic
    tensorwise scaling (float8_linear.py from_float asserts a dynamic weight cast), and torchtitan refuses it beside a
    recipe name (pytorch/torchtitan@238fa99 components/quantization/float8.py). The engine is checked by
    memory.engines.check_engine_options."""
    recipe = Float8Recipe(recipe)
    if options.float8_all_gather and recipe is not Float8Recipe.tensorwise:
        raise ZeroplanError(f"--float8-all-gather casts each weight with one tensorwise scale: give --float8 tensorwise, "
                            f"not --float8 {recipe.value}")


def is_float8_weight(shape: tuple[int, ...]) -> bool:
    """A block tensor FSDP2 all-gathers in float8 under --float8-all-gather: a linear's (out, in) weight whose two
    dims are multiples of 16 (torchtitan's module_filter_fn); norms and biases are 1-D and stay in param_dtype."""
    return len(shape) == 2 and all(d % ALIGNMENT == 0 for d in shape)
