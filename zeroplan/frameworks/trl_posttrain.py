"""Which TRL trainer a config YAML is for, by the keys only its config declares, and the post-training it means.

huggingface/trl@f2cd57710ae345ea6428ae95363267fcf38a3dc8: trl/trainer/dpo_config.py, kto_config.py,
trl/experimental/cpo/cpo_config.py, trl/experimental/gkd/gkd_config.py (ORPOConfig has no key of its own). KTO is read
as --post-training kto (its KL batch, memory.reference); GKD as --post-training kd with --teacher from
`teacher_model_name_or_path`, off-policy only: `lmbda` (default 0.5) is the share of steps the student generates and
`seq_kd` the teacher's generation, neither modelled, and beta 0 or 1 is a plain KL, another loss than the
generalized JSD measured (memory.posttrain). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from zeroplan.frameworks.run import NotModelled, Taken
from zeroplan.memory.setup import PostTraining

# Keys of DPO and its relatives (DPOConfig, ORPOConfig, KTOConfig, CPOConfig) and of the RL trainers (GRPOConfig,
# RLOOConfig, PPOConfig, OnlineDPOConfig): another model (reference, reward, value) or generation
PREFERENCE_KEYS = ("beta", "max_prompt_length", "loss_type", "rpo_alpha", "ref_model_init_kwargs",
                   "precompute_ref_log_probs", "sync_ref_model", "desirable_weight", "simpo_gamma", "cpo_alpha")
DPO_ONLY = ("loss_weights", "ld_alpha", "f_divergence_type", "f_alpha_divergence_coef", "use_weighting", "discopop_tau",
            "rpo_alpha", "ref_model_init_kwargs", "precompute_ref_log_probs")
CPO_ONLY = ("cpo_alpha", "simpo_gamma")  # CPOTrainer: no reference model; loss_type simpo is SimPO
KTO_ONLY = ("desirable_weight", "undesirable_weight", "train_sampling_strategy")
GKD_ONLY = ("lmbda", "seq_kd", "teacher_model_name_or_path", "teacher_model_init_kwargs")
CPO_LOSSES = ("sigmoid", "hinge", "ipo", "simpo")  # CPOConfig.loss_type; any other names a DPOConfig loss (apo_zero...)
GKD_LMBDA, GKD_BETA = 0.5, 0.5  # GKDConfig.lmbda, GKDConfig.beta defaults
SIXTEEN_BIT = (None, "auto", "bfloat16", "float16")  # teacher_model_init_kwargs.dtype memory.teacher counts


def _shown(value) -> str | int | float | bool:
    return value if isinstance(value, (str, int, float, bool)) else "(set)"


def post_training_of(data: Mapping, refuse: NotModelled) -> list[Taken]:
    """What the file's trainer means: --post-training (and --teacher for GKD); [] for SFT or what is refused."""
    if any(k in data for k in GKD_ONLY):
        return _gkd(data, refuse)
    if (preference := preference_of(data, refuse)) is None:
        return []
    key, pt = preference
    return [Taken(key, _shown(data[key]), "post_training", pt, f"--post-training {pt.value}")]


def preference_of(data: Mapping, refuse: NotModelled) -> tuple[str, PostTraining] | None:
    """(the key that names it, the post-training) of a preference trainer's file; None for SFT; refused in one line
    where the keys do not say which trainer (ORPO's are all shared) or what is not modelled (precomputed)."""
    if data.get("precompute_ref_log_probs") is True:
        refuse.add("precompute_ref_log_probs", True, "the reference log-probs computed before training "
                   "(no reference forward in the step)")  # fmt: skip
        return None
    if kto := next((k for k in KTO_ONLY if k in data), None):
        return kto, PostTraining.kto
    simpo = "loss_type" if data.get("loss_type") == "simpo" else None
    if cpo := next((k for k in CPO_ONLY if k in data), None) or simpo:
        return cpo, PostTraining.simpo
    losses = data.get("loss_type")
    losses = [losses] if isinstance(losses, str) else losses if isinstance(losses, list) else []
    if any(isinstance(x, str) and x not in CPO_LOSSES for x in losses):
        return "loss_type", PostTraining.dpo
    if dpo := next((k for k in (*DPO_ONLY, "sync_ref_model") if k in data), None):
        return dpo, PostTraining.dpo
    if shared := next((k for k in PREFERENCE_KEYS if k in data), None):
        refuse.ask("post_training", shared, data[shared], "a key DPOConfig, ORPOConfig and CPOConfig share: the file "
                   "does not say which trainer (trl dpo / orpo / cpo) runs it; give --post-training dpo|orpo|simpo")
    return None


def _gkd(data: Mapping, refuse: NotModelled) -> list[Taken]:
    """GKDConfig: off-policy distillation from `teacher_model_name_or_path`, or one line naming what is not modelled."""
    lmbda, beta = data.get("lmbda", GKD_LMBDA), data.get("beta", GKD_BETA)
    teacher = data.get("teacher_model_name_or_path")
    dtype = (data.get("teacher_model_init_kwargs") or {}).get("dtype") if isinstance(
        data.get("teacher_model_init_kwargs"), Mapping) else None
    if not isinstance(teacher, str) or not teacher:
        refuse.add("teacher_model_name_or_path", _shown(teacher), "GKD without a teacher named in the file")
    elif lmbda != 0:
        refuse.add("lmbda", _shown(lmbda), "GKD's on-policy generation by the student (GKDConfig's default 0.5 when "
                   "not set): its KV cache and generation; off-policy (lmbda 0) is modelled")  # fmt: skip
    elif data.get("seq_kd") is True:
        refuse.add("seq_kd", True, "GKD's sequence-level distillation (the teacher generates the targets)")
    elif beta in (0, 1):
        refuse.add("beta", beta, "GKD with a plain KL (beta 0 or 1): another loss than the generalized JSD measured")
    elif dtype not in SIXTEEN_BIT:
        refuse.add("teacher_model_init_kwargs.dtype", _shown(dtype), "a teacher not in 16 bits")
    else:
        return [Taken("lmbda", lmbda, "post_training", PostTraining.kd, "--post-training kd (off-policy: no generation)"),
                Taken("teacher_model_name_or_path", teacher, "teacher", teacher, f"--teacher {teacher}")]
    return []
