"""Advisor policies: every threshold carries a source, named policies, overrides from a mapping and from --set."""

import pytest

from zeroplan.advise.policy import (
    ARTICLE,
    DEFAULT,
    THRESHOLDS,
    AdvisorPolicy,
    Tree,
    parse_assignments,
    policy_named,
    with_overrides,
)
from zeroplan.errors import SpecError
from zeroplan.hardware.spec import Topology


@pytest.mark.parametrize("field", THRESHOLDS)
def test_every_threshold_declares_a_source(field):
    source = DEFAULT.source(field)
    assert isinstance(source, str) and len(source) > 10


def test_the_article_numbers_cite_the_article():
    for field in ("zero3_topologies", "zero3_min_global_batch", "max_zero3_overhead_pct", "long_sequence_tokens",
                  "article_zero3_min_grad_accum"):
        assert DEFAULT.source(field).startswith("article ")
    assert "judgment" in DEFAULT.source("embedding_heavy_fraction")  # the article gives no number
    assert DEFAULT.source("article_zero3_min_grad_accum").endswith(
        "(wrong: ZeRO-3 re-gathers every micro-step, docs/throughput.md 5)")  # the correction, in the repo


def test_named_policies():
    assert policy_named("article") is ARTICLE and ARTICLE.tree is Tree.article
    assert policy_named("default") is DEFAULT and DEFAULT.tree is Tree.default
    assert (ARTICLE.zero3_min_global_batch, ARTICLE.zero3_topologies) == (512, (Topology.nvlink,))
    with pytest.raises(SpecError, match="unknown policy 'zeroplan'; policies: article, default"):
        policy_named("zeroplan")


def test_policies_are_frozen():
    with pytest.raises(Exception):
        DEFAULT.max_zero3_overhead_pct = 5.0


def test_override_replaces_value_and_source():
    policy = with_overrides(DEFAULT, {"max_zero3_overhead_pct": 5, "zero3_topologies": ["nvlink", "multinode"]},
                            "team.yaml")
    assert policy.max_zero3_overhead_pct == 5.0
    assert policy.zero3_topologies == (Topology.nvlink, Topology.multinode)
    assert policy.source("max_zero3_overhead_pct") == "set by team.yaml"
    assert policy.source("long_sequence_tokens") == DEFAULT.source("long_sequence_tokens")
    assert policy.tree is Tree.default and DEFAULT.max_zero3_overhead_pct == 11.0


def test_a_later_override_wins_and_names_its_origin():
    first = with_overrides(DEFAULT, {"max_gpus": 64}, "team.yaml")
    second = with_overrides(first, {"max_gpus": 128}, "--set")
    assert second.max_gpus == 128 and second.source("max_gpus") == "set by --set"
    assert second.overrides == (("max_gpus", "--set"),)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"max_zero3_overhead": 5}, "unknown policy key 'max_zero3_overhead'; did you mean max_zero3_overhead_pct?"),
        ({"tree": "article"}, "unknown policy key 'tree'"),
        ({"min_headroom_fraction": 1.5}, "min_headroom_fraction: Input should be less than 1"),
        ({"zero3_min_global_batch": "lots"}, "zero3_min_global_batch: Input should be a valid integer"),
        ({"zero3_topologies": ["infiniband"]}, "zero3_topologies.0: Input should be 'nvlink', 'pcie' or 'multinode'"),
    ],
)
def test_bad_overrides_name_the_key(values, needle):
    with pytest.raises(SpecError, match="^team.yaml: ") as err:
        with_overrides(DEFAULT, values, "team.yaml")
    assert needle in str(err.value)


def test_a_policy_file_must_be_a_mapping():
    with pytest.raises(SpecError, match="expected a mapping of policy keys to values, got list"):
        with_overrides(DEFAULT, [1, 2], "team.yaml")


def test_assignments_from_text():
    values = parse_assignments(["max_zero3_overhead_pct=5", "zero3_topologies=nvlink, multinode",
                                "host_memory_gib_per_node=null", "consider_offload=false"])
    policy = with_overrides(DEFAULT, values, "--set")
    assert policy.max_zero3_overhead_pct == 5.0
    assert policy.zero3_topologies == (Topology.nvlink, Topology.multinode)
    assert policy.host_memory_gib_per_node is None and policy.consider_offload is False


@pytest.mark.parametrize(("item", "needle"), [("max_gpus", "expected key=value"), ("=3", "expected key=value"),
                                              ("gpus=3", "unknown policy key 'gpus'")])
def test_bad_assignments(item, needle):
    with pytest.raises(SpecError, match=needle):
        parse_assignments([item])


def test_policy_dump_round_trips():
    policy = with_overrides(ARTICLE, {"zero3_min_global_batch": 256}, "--set")
    assert AdvisorPolicy.model_validate(policy.model_dump(mode="json")) == policy
