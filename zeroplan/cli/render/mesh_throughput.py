"""Rich tables for `zeroplan throughput` on a mesh: step time per ZeRO stage, each mesh term, the groups' links."""

from __future__ import annotations

from rich.table import Table

from zeroplan.cli.render import assumptions_panel

GB = 1e9  # wire bytes are shown in decimal GB, labelled GB
TERMS = (("tp", "TP s"), ("cp", "CP exposed s"), ("ep", "EP s"), ("p2p", "p2p s"), ("bubble", "bubble s"),
         ("zero", "ZeRO exposed s"))


def mesh_throughput_renderables(data: dict) -> list:
    """Per stage: step, compute, each term's seconds, tokens/s/GPU, MFU; then wire bytes and the groups."""
    setup = data["setup"]
    title = (f"{data['model']['name']} on {data['mesh']['description']}, {data['hardware']} ({data['topology']}), "
             f"seq {setup['seq_len']}, micro-batch {setup['micro_batch']} x {setup['grad_accum']} micro-batches, "
             f"compute at {data['compute_efficiency']:.0%} of peak")
    table = Table(title=title, title_justify="left")
    for col in ("stage", "step s", "compute s", *(label for _, label in TERMS), "tok/s/GPU", "MFU", "vs ZeRO-0"):
        table.add_column(col, justify="right")
    for s in data["stages"]:
        table.add_row(f"ZeRO-{s['stage']}", f"{s['step_time_s']:.3f}", f"{s['compute_s']:.3f}",
                      *(f"{s['terms'][key]['seconds']:.3f}" for key, _ in TERMS),
                      f"{s['tokens_per_s_per_gpu']:,.0f}", f"{s['mfu']:.1%}", f"{s['overhead_vs_zero0_pct']:+.1f} %")
    wire = Table(title="wire GB per GPU per step (slowest pipeline stage)", title_justify="left")
    for col in ("stage", "TP", "CP", "EP", "p2p", "ZeRO"):
        wire.add_column(col, justify="right")
    for s in data["stages"]:
        wire.add_row(f"ZeRO-{s['stage']}", *(f"{s['terms'][k]['wire_bytes'] / GB:,.2f}"
                                           for k in ("tp", "cp", "ep", "p2p", "zero")))
    groups = Table(title="groups (Megatron order tp-cp-ep-dp-pp)", title_justify="left")
    for col in ("group", "ranks", "stride", "link", "busbw GB/s", "alpha us"):
        groups.add_column(col, justify="right")
    for g in data["groups"]:
        groups.add_row(g["name"], str(g["ranks"]), str(g["stride"]), g["link"], f"{g['busbw_gbps']:g}",
                       f"{g['alpha_us']:g}")
    return [table, wire, groups, assumptions_panel(data["assumptions"])]
