"""The tensors of a model grouped the way PyTorch engines wrap it: a root unit and one unit per block.

FSDP wraps each transformer block (`ModuleWrapPolicy({Block})` / `fully_shard(block)`) and the root takes
what is left (embeddings, final norm, an untied head). ZeroRedundancyOptimizer partitions whole tensors.
Built from zeroplan.params' module inventory: a module whose name has a `*` repeats once per layer.
Pure: no I/O.
"""

from dataclasses import dataclass
from math import prod

from zeroplan.memory.states import ModelSummary

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelLayout:
    """Root-unit tensors and the tensors of one block, repeated `num_blocks` times (shapes; flat where unknown)."""

    root: tuple[Shape, ...]
    block: tuple[Shape, ...] = ()  # the largest block (of the largest kind, where blocks differ)
    num_blocks: int = 0  # all blocks, of every kind
    exact_shapes: bool = True  # False: some modules listed no shapes and are read as one flat tensor
    # Blocks that differ (a dense-then-MoE stack, linear- and full-attention layers): each kind's tensors and how
    # many blocks have it. () = every block is `block`.
    kinds: tuple[tuple[tuple[Shape, ...], int], ...] = ()

    @property
    def block_kinds(self) -> tuple[tuple[tuple[Shape, ...], int], ...]:
        if self.kinds:
            return self.kinds
        return ((self.block, self.num_blocks),) if self.num_blocks else ()

    @property
    def root_numel(self) -> int:
        return sum(prod(s) for s in self.root)

    @property
    def block_numel(self) -> int:
        return sum(prod(s) for s in self.block)

    @property
    def unit_numels(self) -> tuple[int, ...]:
        """Elements of every wrapped unit, root first, then the blocks, largest kind first."""
        sizes = sorted(((sum(prod(s) for s in shapes), n) for shapes, n in self.block_kinds), reverse=True)
        return (self.root_numel,) + tuple(size for size, n in sizes for _ in range(n))

    def tensors(self) -> list[Shape]:
        """Every parameter tensor of the model."""
        return list(self.root) + [s for shapes, n in self.block_kinds for s in list(shapes) * n]


def _shapes(module) -> tuple[tuple[Shape, ...], bool]:
    if module.shapes:
        return module.shapes, True
    return ((module.params,),) if module.params else (), False


def layout_from_modules(modules, num_layers: int) -> ModelLayout:
    """Root and per-block tensors from a module inventory; per-layer modules (`*` in the name) split evenly over layers.

    A per-layer module whose count is not a multiple of the layers (T5's encoder vs decoder) leaves the remainder
    in the root, so blocks of different kinds are averaged into one.
    """
    root: list[Shape] = []
    block: list[Shape] = []
    exact = True
    for m in modules:
        if m.tied:
            continue
        shapes, known = _shapes(m)
        exact = exact and known
        per_block = m.count // num_layers if "*" in m.name and num_layers else 0
        block += list(shapes) * per_block
        root += list(shapes) * (m.count - per_block * num_layers)
    return ModelLayout(root=tuple(root), block=tuple(block), num_blocks=num_layers if block else 0, exact_shapes=exact)


def layout_for(config) -> ModelLayout:
    """The layout of a family config (or ModelSpec) as transformers builds it."""
    from zeroplan.models.params import module_inventory

    cfg = getattr(config, "config", config)
    decoder = cfg.decoder()
    if decoder is not None and len({layer for layer, _ in decoder.layers}) > 1:
        layout = layout_from_decoder(decoder)
        if len(layout.kinds) > 1:
            return layout
    arch = cfg.architecture()
    return layout_from_modules(module_inventory(cfg), arch.num_layers + arch.num_encoder_layers)


def layout_from_decoder(decoder) -> ModelLayout:
    """One block per decoder layer, each of its own structure (zeroplan.models.params.decoder.layer_kinds), and a
    root of what is not in a layer (embeddings, final norm, an untied head)."""
    from zeroplan.models.params.decoder import decoder_modules, layer_kinds

    kinds = tuple((tuple(s for m in modules for s in m.shapes), n) for modules, n in layer_kinds(decoder))
    root = tuple(s for m in decoder_modules(decoder) if "*" not in m.name and not m.tied for s in m.shapes)
    largest = max(kinds, key=lambda kind: sum(prod(s) for s in kind[0]))[0]
    return ModelLayout(root=root, block=largest, num_blocks=sum(n for _, n in kinds), kinds=kinds)


def layout_from_summary(model: ModelSummary) -> ModelLayout:
    """A bare parameter count: one flat root of the embeddings (if known) and the rest in one unit of the largest layer.

    Without an inventory the wrapping is unknown; the blocks are taken as units of L elements (--largest-layer).
    """
    largest = model.largest_layer_params
    rest = model.num_params - model.num_embedding_params
    if largest <= 0 or largest >= rest:
        return ModelLayout(root=((model.num_params,),), exact_shapes=False)
    blocks, extra = divmod(rest, largest)
    root = tuple(s for s in ((model.num_embedding_params,), (extra,)) if s[0])
    return ModelLayout(root=root, block=((largest,),), num_blocks=blocks, exact_shapes=False)
