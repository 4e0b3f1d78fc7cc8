"""Every parameter tensor of a model under its Hugging Face name, and the linears an adapter can target.

The names are what `AutoModelForCausalLM.from_config(config).named_parameters()` yields (transformers 5.x,
modeling_<family>.py), one entry per tensor with its shape (nn.Linear's weight is (out, in)); a tied LM head
is not listed, as named_parameters() lists a shared tensor once. validation/measure_finetune.py checks names,
shapes and counts against transformers. This is the small interface the fine-tuning modes read
(zeroplan.memory.finetune): `named_parameters` and `linears`.
Pure: imports neither rich, typer nor yaml nor torch, and does no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from zeroplan.errors import ZeroplanError
from zeroplan.models import families as fam
from zeroplan.models.params.modules import GATE_UP

Shape = tuple[int, ...]


class NamedParam(NamedTuple):
    """One parameter tensor: its full HF name, shape, and the nn.Module that owns it."""

    name: str  # e.g. model.layers.0.self_attn.q_proj.weight
    shape: Shape
    module: str  # e.g. model.layers.0.self_attn.q_proj
    linear: bool = False  # owned by an nn.Linear (what peft's LoRA wraps)

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class Linear(NamedTuple):
    """One nn.Linear: its HF module name, in and out features, and whether it has a bias."""

    name: str
    n_in: int
    n_out: int
    bias: bool


def _linear(module: str, n_in: int, n_out: int, bias: bool) -> list[NamedParam]:
    out = [NamedParam(f"{module}.weight", (n_out, n_in), module, True)]
    return out + [NamedParam(f"{module}.bias", (n_out,), module, True)] if bias else out


def _norm(module: str, width: int) -> NamedParam:
    return NamedParam(f"{module}.weight", (width,), module)


# RMSNorms of one decoder layer, by family (modeling_llama.py LlamaDecoderLayer; modeling_gemma2.py adds two).
LAYER_NORMS = ("input_layernorm", "post_attention_layernorm")
GEMMA2_LAYER_NORMS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                      "post_feedforward_layernorm")


def _attention(c: fam.RMSNormDecoderConfig, p: str, qkv_bias: bool, o_bias: bool) -> list[NamedParam]:
    d, head = c.hidden_size, c.attention_head_dim
    q, kv = c.num_attention_heads * head, c.kv_heads * head
    if isinstance(c, fam.Phi3Config):  # Phi3Attention builds o_proj first
        return _linear(f"{p}.self_attn.o_proj", q, d, o_bias) + _linear(f"{p}.self_attn.qkv_proj", d, q + 2 * kv, False)
    else:
        qkv = [*_linear(f"{p}.self_attn.q_proj", d, q, qkv_bias), *_linear(f"{p}.self_attn.k_proj", d, kv, qkv_bias),
               *_linear(f"{p}.self_attn.v_proj", d, kv, qkv_bias)]
    return qkv + _linear(f"{p}.self_attn.o_proj", q, d, o_bias)


def _mlp(c: fam.RMSNormDecoderConfig, p: str, bias: bool) -> list[NamedParam]:
    d, inner = c.hidden_size, c.intermediate_size
    if isinstance(c, fam.MixtralConfig):  # transformers 5: a router Linear and one experts module of 3-d tensors
        e = c.num_local_experts
        return [*_linear(f"{p}.mlp.gate", d, e, False),
                NamedParam(f"{p}.mlp.experts.gate_up_proj", (e, GATE_UP * inner, d), f"{p}.mlp.experts"),
                NamedParam(f"{p}.mlp.experts.down_proj", (e, d, inner), f"{p}.mlp.experts")]
    if isinstance(c, fam.Phi3Config):
        up = _linear(f"{p}.mlp.gate_up_proj", d, GATE_UP * inner, False)
    else:
        up = [*_linear(f"{p}.mlp.gate_proj", d, inner, bias), *_linear(f"{p}.mlp.up_proj", d, inner, bias)]
    return up + _linear(f"{p}.mlp.down_proj", inner, d, bias)


def _biases(c: fam.RMSNormDecoderConfig) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o bias, MLP bias) as each family's modeling file builds them."""
    if isinstance(c, fam.Qwen2Config):
        return True, False, False
    if isinstance(c, fam.LlamaConfig):
        return c.attention_bias, c.attention_bias, c.mlp_bias
    if isinstance(c, fam.Gemma2Config):
        return c.attention_bias, c.attention_bias, False
    return False, False, False


def _rmsnorm_decoder(c: fam.RMSNormDecoderConfig) -> list[NamedParam]:
    d = c.hidden_size
    qkv_bias, o_bias, mlp_bias = _biases(c)
    norms = GEMMA2_LAYER_NORMS if isinstance(c, fam.Gemma2Config) else LAYER_NORMS
    out = [NamedParam("model.embed_tokens.weight", (c.vocab_size, d), "model.embed_tokens")]
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}"
        out += _attention(c, p, qkv_bias, o_bias) + _mlp(c, p, mlp_bias) + [_norm(f"{p}.{n}", d) for n in norms]
    out.append(_norm("model.norm", d))
    if not c.tie_word_embeddings:
        out += _linear("lm_head", d, c.vocab_size, False)
    return out


def named_parameters(spec: fam.ModelSpec) -> list[NamedParam]:
    """The model's parameter tensors in named_parameters() order and naming; ZeroplanError for a family not described."""
    if isinstance(spec.config, fam.RMSNormDecoderConfig):
        return _rmsnorm_decoder(spec.config)
    raise ZeroplanError(f"{spec.name}: fine-tuning modes need the parameter names of family "
                        f"{spec.architecture().family}, not described yet (supported: the RMSNorm decoders "
                        "llama, mistral, mixtral, qwen2, gemma2, phi3)")


OUTPUT_HEAD = "lm_head"  # get_output_embeddings(): peft's all-linear leaves it out


def linears(params: list[NamedParam]) -> list[Linear]:
    """The nn.Linear modules of a parameter list, in order: name, in, out, bias."""
    found: dict[str, Linear] = {}
    for p in params:
        if not p.linear:
            continue
        if p.name.endswith(".weight"):
            found[p.module] = Linear(p.module, p.shape[1], p.shape[0], False)
        else:
            found[p.module] = found[p.module]._replace(bias=True)
    return list(found.values())
