"""Peer estimators' memory formulas, restated from their source and docs at the commits named below, and their answers.

Nothing here is a dependency of zeroplan: the formulas are restated in our notation (no peer code is copied) so
that docs/comparison.md can show what each peer says when the peer itself is not installed, and
tests/test_compare.py checks every restatement against the peer's own published test vectors. Symbols: P
parameters, L layers, h hidden, a heads, g key/value heads, f MLP inner width, V vocabulary, s sequence length,
b micro-batch, N data-parallel GPUs, t tensor-parallel degree. Bytes are per GPU unless a name says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from zeroplan.deepspeed.estimator import zero2_model_states, zero3_model_states


@dataclass(frozen=True)
class PeerTerms:
    """One estimator's per-GPU answer at one stage, by term (bytes); None where the estimator has no such term."""

    estimator: str
    stage: int | None  # None: the estimator has no notion of ZeRO stages
    parameters: float | None
    gradients: float | None
    optimizer_states: float | None
    activations: float | None
    buffers: float | None  # communication buckets, gathered layers, prefetch
    overhead: float | None  # CUDA context, NCCL, fragmentation, misc
    total: float
    source: str


# --- EleutherAI cookbook, EleutherAI/cookbook@827ee3b:calc/calc_transformer_mem.py ---

COOKBOOK_ADAMW_BYTES = 12  # fp32 master + m + v per parameter
COOKBOOK_GRAD_BYTES = 4  # --bytes-per-grad-ele default: fp32 gradients
COOKBOOK_LOW_BYTES = 2  # --low-prec-bytes-per-val: 16-bit weights and activations
COOKBOOK_BUCKET = 5e8  # --zero-allgather-bucket-size, elements
COOKBOOK_MAX_LIVE = 1e9  # --zero3-max-live-params, elements


@dataclass(frozen=True)
class CookbookRun:
    """The cookbook's command-line flags (its defaults where it has them)."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    sequence_length: int = 2048
    batch_size_per_gpu: int = 1
    vocab_size: int = 51200
    ffn_expansion_factor: float = 4.0
    num_mlp_linears: int = 2
    kv_size_ratio: float = 1.0
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    num_gpus: int = 1
    zero_stage: int = 1
    checkpoint_activations: bool = False
    partition_activations: bool = False


def cookbook_params(r: CookbookRun) -> float:
    """P = 2 V h + h s + (8 h L + 2 h) + 2 (1 + kv) L h^2 + n_lin ff L h^2.

    Untied embeddings, a learned position table of s rows always, LayerNorm weights and biases.
    """
    h, layers = r.hidden_size, r.num_layers
    return (2 * r.vocab_size * h + h * r.sequence_length + (8 * h * layers + 2 * h)
            + 2 * (1 + r.kv_size_ratio) * layers * h**2 + r.num_mlp_linears * r.ffn_expansion_factor * layers * h**2)


def cookbook_activations(r: CookbookRun) -> float:
    """s b h L (16 B + 2 + (2 B + 1) a s / h) without checkpointing; s b h L (16 B + 2) with it (Korthikanti's
    selective row, not full recompute); / t with --partition-activations. B = 2."""
    coefficient = 16 * COOKBOOK_LOW_BYTES + 2
    if not r.checkpoint_activations:
        coefficient += (2 * COOKBOOK_LOW_BYTES + 1) * r.num_attention_heads * r.sequence_length / r.hidden_size
    acts = r.sequence_length * r.batch_size_per_gpu * r.hidden_size * r.num_layers * coefficient
    return acts / r.tensor_parallel_size if r.partition_activations else acts


def cookbook_memory(r: CookbookRun) -> PeerTerms:
    """Per-GPU memory: weights P 2 / (t p) (/ N at ZeRO-3); gradients P 4 (/ N at ZeRO >= 2, never / t p);
    optimizer P 12 (/ N at ZeRO >= 1); buffers: bucket x 2 B at ZeRO >= 1 with N > 1, + max_live x 2 B at ZeRO-3."""
    p, n, z = cookbook_params(r), r.num_gpus, r.zero_stage
    weights = p * COOKBOOK_LOW_BYTES / (r.tensor_parallel_size * r.pipeline_parallel_size)
    weights = weights / n if z >= 3 else weights
    grads = p * COOKBOOK_GRAD_BYTES / (n if z >= 2 else 1)
    optim = p * COOKBOOK_ADAMW_BYTES / (n if z >= 1 else 1)
    comm = 0.0
    if z >= 1 and n > 1:
        comm = COOKBOOK_BUCKET * COOKBOOK_LOW_BYTES + (COOKBOOK_MAX_LIVE * COOKBOOK_LOW_BYTES if z >= 3 else 0)
    acts = cookbook_activations(r)
    return PeerTerms("EleutherAI cookbook", z, weights, grads, optim, acts, comm, 0.0,
                     weights + grads + optim + acts + comm,
                     "documented formulas (EleutherAI/cookbook@827ee3b:calc/calc_transformer_mem.py)")


# --- llm-analysis, cli99/llm-analysis@d841e40:llm_analysis/analysis.py; PyPI 0.2.2 differs, see compare_peers ---

LA_WEIGHT_BYTES = 2  # w16
LA_ACT_BYTES = 2  # a16
LA_NORM_BYTES = 4  # layernorm_dtype_bytes default
LA_MASTER_BYTES = 4  # master_weights_dtype_bytes: also the gradient bytes
LA_ADAM_BYTES = 8  # other_op_bytes default (m + v)
LA_RECOMPUTE = {"none": 0, "selective": 1, "full": 4}  # activation_recomputation levels used here


@dataclass(frozen=True)
class LlmAnalysisRun:
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    ffn_size: int
    vocab_size: int
    gated: bool
    seq_len: int
    batch_size_per_gpu: int
    dp: int
    ds_zero: int
    recompute: int = 0  # 0 none, 1 selective (drop the attention core), 4 full
    flash_attn: bool = True


def llm_analysis_layer_params(r: LlmAnalysisRun) -> int:
    """2 h^2 + 2 h (h g / a) attention + (3 if gated else 2) h f MLP + 2 h norms."""
    h = r.hidden_size
    attn = 2 * h * h + 2 * h * (h * r.num_key_value_heads // r.num_attention_heads)
    return attn + (3 if r.gated else 2) * h * r.ffn_size + 2 * h


def llm_analysis_params(r: LlmAnalysisRun) -> int:
    """L layer params + V h (embedding assumed tied) + h final norm."""
    return r.num_layers * llm_analysis_layer_params(r) + r.vocab_size * r.hidden_size + r.hidden_size


def llm_analysis_activations(r: LlmAnalysisRun) -> float:
    """Per layer: attention (5 s b h) B + core + s b h (dropout mask), core = (2 s b h + 4 a s b) B with flash
    else 2 a s^2 b B, dropped at level 1; MLP s b h B + 2 B (f / h) s b h; norms 2 s b h 4. Level 4: s b h B.
    Plus once: input embedding s b h B, logits s b V B, final norm s b h 4."""
    sbh = r.seq_len * r.batch_size_per_gpu * r.hidden_size
    if r.recompute == 4:
        layer = sbh * LA_ACT_BYTES
    else:
        core = 0.0
        if r.recompute == 0:
            core = ((2 * sbh + 4 * r.num_attention_heads * r.seq_len * r.batch_size_per_gpu) * LA_ACT_BYTES if r.flash_attn
                    else 2 * r.num_attention_heads * r.seq_len**2 * r.batch_size_per_gpu * LA_ACT_BYTES)
        attn = 5 * sbh * LA_ACT_BYTES + core + sbh
        mlp = sbh * LA_ACT_BYTES + 2 * LA_ACT_BYTES * (r.ffn_size / r.hidden_size) * sbh
        layer = attn + mlp + 2 * sbh * LA_NORM_BYTES
    once = sbh * LA_ACT_BYTES + r.seq_len * r.batch_size_per_gpu * r.vocab_size * LA_ACT_BYTES + sbh * LA_NORM_BYTES
    return layer * r.num_layers + once


def llm_analysis_memory(r: LlmAnalysisRun) -> PeerTerms:
    """weights P 2 (/ N at ZeRO-3); gradients P 4 (/ N at ZeRO >= 2); optimizer P 12 (/ N at ZeRO >= 1);
    peak = weights + optimizer + max(activations, gradients) + max(prefetch, loss backward), prefetch = 2 unsharded
    layers (forward and backward prefetch) x 2 B, loss backward = the logits, s b V B (llm-analysis: 'logits size')."""
    p, n, z = llm_analysis_params(r), r.dp, r.ds_zero
    weights = p * LA_WEIGHT_BYTES / (n if z >= 3 else 1)
    grads = p * LA_MASTER_BYTES / (n if z >= 2 else 1)
    optim = p * (LA_MASTER_BYTES + LA_ADAM_BYTES) / (n if z >= 1 else 1)
    acts = llm_analysis_activations(r)
    prefetch = 2 * llm_analysis_layer_params(r) * LA_WEIGHT_BYTES
    loss_bwd = r.seq_len * r.batch_size_per_gpu * r.vocab_size * LA_ACT_BYTES
    peak = weights + optim + max(acts, grads) + max(prefetch, loss_bwd)
    return PeerTerms("llm-analysis (git d841e40)", z, weights, grads, optim, acts, max(prefetch, loss_bwd), None, peak,
                     "documented formulas (cli99/llm-analysis@d841e40:llm_analysis/analysis.py); "
                     "peak counts max(activations, gradients)")


# --- Hugging Face accelerate estimate-memory: huggingface/accelerate@16cb6eb:src/accelerate/commands/estimate.py ---

ACCELERATE_TRAINING_FACTOR = {"float32": 4, "float16": 2, "bfloat16": 2}  # x the fp32 model size, since PR #2581


def accelerate_training_bytes(fp32_model_bytes: float, dtype: str) -> float:
    """'Training using Adam': the maximum of its four stages, 4 X for float32 and 2 X for 16-bit, X the fp32 size.

    For 16-bit that is 8 B per parameter, whatever the data-parallel degree (no ZeRO, no activations).
    """
    return ACCELERATE_TRAINING_FACTOR[dtype] * fp32_model_bytes


def accelerate_memory(num_params: int) -> PeerTerms:
    total = accelerate_training_bytes(4 * num_params, "bfloat16")
    return PeerTerms("accelerate estimate-memory", None, None, None, None, None, None, None, total,
                     "documented formula (huggingface/accelerate@16cb6eb:src/accelerate/commands/estimate.py): "
                     "bf16 training = 2 x fp32 size")


# --- DeepSpeed's estimators, through zeroplan.dscompat (reproduced to the byte, tests/test_dscompat.py) ---

DS_SPLIT = "split by DeepSpeed's code comment: 16-bit params, 16-bit + fp32 grads, fp32 master + Adam"


def deepspeed_memory(num_params: int, largest_layer: int, gpus_per_node: int, nodes: int) -> list[PeerTerms]:
    """ZeRO-2 and ZeRO-3 without offload (GPU bytes exactly as DeepSpeed returns them), split into terms.

    ZeRO-2: 2 P + int(18 P / N), 18 = 2 16-bit grads + 4 fp32 grads + 4 fp32 master + 8 Adam.
    ZeRO-3: 4 L + int(18 P / N), 18 = 2 16-bit params + 4 fp32 grads + 4 master + 8 Adam; 4 L = gathered layer.
    """
    n = gpus_per_node * nodes
    _, gpu2 = zero2_model_states(num_params, gpus_per_node, nodes, cpu_offload=False)
    _, gpu3, largest = zero3_model_states(num_params, largest_layer, gpus_per_node, nodes, cpu_offload=False,
                                          cpu_offload_params=False)
    source = "zeroplan.deepspeed.estimator (DeepSpeed 0.19.8 formulas, to the byte); " + DS_SPLIT
    return [
        PeerTerms("DeepSpeed estimator", 2, 2 * num_params, 6 * num_params / n, 12 * num_params / n, None, None, None,
                  gpu2, source),
        PeerTerms("DeepSpeed estimator", 3, 2 * num_params / n, 4 * num_params / n, 12 * num_params / n, None, largest,
                  None, gpu3, source),
    ]
