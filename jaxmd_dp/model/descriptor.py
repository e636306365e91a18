"""What a descriptor is to the rest of the code, and how to add one.

A descriptor maps each atom's normalised environment matrix R (nframes, natoms, nnei, 4) — the rows
s(r)·[1, x/r, y/r, z/r] of its neighbour slots (:mod:`jaxmd_dp.geometry.env_mat`), shifted and scaled
by the statistics davg/dstd — to the features D (nframes, natoms, dim) that the fitting nets read.
Outside its own module a descriptor is a :class:`Descriptor`: a frozen (hashable) dataclass of its
hyper-parameters that also says

- how it is built: :meth:`~Descriptor.from_config` from its validated config section
  (``model.descriptor``, DeePMD-kit's keys and defaults); :meth:`~Descriptor.from_dict` /
  :meth:`~Descriptor.to_dict` for the ``hyper`` dict of model files and checkpoints;
- its Flax module (:meth:`~Descriptor.module`): R, atype → D, its weights under ``params["descriptor"]``;
- its output width (:attr:`~Descriptor.dim_out`);
- what the neighbour list must hold: ``rcut``, ``rcut_smth`` (Å) and :attr:`~Descriptor.nlist_sel`, the
  slots of each neighbour-type section;
- its statistics: their shape (:meth:`~Descriptor.stat_shape`) and how they are computed from sampled
  frames (:meth:`~Descriptor.env_stats`);
- its weights' DeePMD-kit names (:meth:`~Descriptor.deepmd_param_path`,
  :attr:`~Descriptor.deepmd_stat_keys`), for importing DeePMD-kit models;
- which CPU fast paths of :mod:`jaxmd_dp.model.fast` apply to it (:attr:`~Descriptor.fast_paths`);
- what else its module reads of each neighbour slot (:meth:`~Descriptor.slot_inputs`: none for se_e2_a, the
  neighbours' types and switch for a descriptor of mixed types).

The model (:mod:`jaxmd_dp.model.energy`) builds the environment matrix, calls the descriptor's module,
then the fitting nets; training (:mod:`jaxmd_dp.train`) reads the descriptor only through this
interface, the model's hyper-parameters (:class:`jaxmd_dp.model.hyper.ModelHyper`) and the plan's rules
(:mod:`jaxmd_dp.model.plan`).

Adding a descriptor (DeePMD-kit's ``se_atten_v2``, say)
--------------------------------------------------------
1. Config: its section in :mod:`jaxmd_dp.config`, with DeePMD-kit's keys, aliases and defaults
   (``deepmd/utils/argcheck.py``), and ``model.descriptor.type`` accepting its name; the model section
   then holds that section for that type.
2. A module ``jaxmd_dp/model/<name>.py`` (as :mod:`jaxmd_dp.model.se_e2_a`) with
   - the Flax module: ``__call__(R, atype, capacity=None, packing=None)`` → D (nframes, natoms, dim_out);
     ``capacity``: the most atoms of each type in a frame (static, None: natoms; see
     :mod:`jaxmd_dp.model.fast.type_groups`), ``packing``: always None unless its fast paths say otherwise;
   - a ``@dataclasses.dataclass(frozen=True)`` subclass of :class:`Descriptor` holding its own
     hyper-parameters (tuples, not lists), with ``type_name`` (DeePMD-kit's name), ``aliases``, and every
     abstract method below. Its fields are its own: nothing is added to another descriptor's class.
     Its :meth:`~Descriptor.to_dict` keys sit beside the fitting net's ``fit_*`` keys in the flat
     ``hyper`` dict, so they must not start with ``fit_`` nor be ``type_map``.
   - ``sel`` as one number (a list of any type's nearest neighbours, DeePMD-kit's "mixed types"): set
     ``mixed_types`` and give ``nlist_sel = (sel,)``: a neighbour list of one section holds the nearest
     neighbours of every type (:mod:`jaxmd_dp.geometry.neighbor`); the fitting is then one net for all types
     (:mod:`jaxmd_dp.model.fitting_mixed`), and :meth:`~Descriptor.slot_inputs` gives the module the
     neighbours' types (:mod:`jaxmd_dp.model.se_atten` is the example).
3. Register: add the class to ``DESCRIPTORS`` in :mod:`jaxmd_dp.model.hyper`.
4. Statistics: :meth:`~Descriptor.env_stats` with DeePMD-kit's rule for it (``compute_input_stats``).
5. Tests: DeePMD-kit's predictions for a model of it, to 1e-10 in float64, as ``tests/model/test_fixtures.py``
   does for se_e2_a, and the physics checks of ``tests/model/test_physics.py``.
Nothing in :mod:`jaxmd_dp.train` changes: it asks the model for sel, statistics and the fast paths.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

DTYPES = {"float64": jnp.float64, "float32": jnp.float32, "bfloat16": jnp.bfloat16}


def precision_name(precision: str) -> str:
    """A config's precision as the nets' dtype name: DeePMD-kit's "default" is float64."""
    return "float64" if precision in (None, "default") else precision


class FastPaths(NamedTuple):
    """Which of the training step's CPU rewrites (:mod:`jaxmd_dp.model.fast`) a descriptor supports; each
    gives the same numbers as the plain path.

    pack: the embedding nets on real neighbour pairs only, and the neighbour list cut to the slots the
      data fills (:mod:`~jaxmd_dp.model.fast.pair_pack`; ``training.pair_packing``).
    table: Rᵀ·G from a node table of each embedding net (:mod:`~jaxmd_dp.model.fast.embed_table`;
      ``training.embedding_table``).
    partners: with pack, the nets once per pair of same-type atoms (``training.pair_sharing``); the
      statistics must also give every slot of a section the same empty row (checked on the data).
    cut: without pack, the neighbour list still cut to the slots the data fills (``training.pair_packing``):
      the descriptor adds the share of the slots past them, empty in every frame, itself (from the
      statistics' empty rows, ``Packing.empty``; the plan's ``keep``).
    merge: frames laid end to end in one list of atoms (``training.merge_batches``,
      :func:`~jaxmd_dp.model.energy.predict_merged`) give each frame's numbers: false where an atom's
      descriptor reads more of its frame than its neighbours (DPA-1's empty slots read the frame's first atom).
    tiers: an atom's energy reads its own slots only (as ``merge``): the training step may run a frame's
      atoms in tiers of fewer slots, sorted by their neighbour count (``ExecutionPlan.tiers``).
    cpu_options: XLA CPU compile options of the training step for this descriptor ((name, value) pairs; those
      this jaxlib accepts, :func:`jaxmd_dp.train.step.train_compiler_options`).
    pair_weight: with ``tiers``, the work per atom as slots · (1 + pair_weight · slots), relative (work over
      pairs of slots: DPA-1's attention), for choosing tiers (:func:`~jaxmd_dp.model.plan.tier_sizes`).
    """

    pack: bool = False
    table: bool = False
    partners: bool = False
    cut: bool = False
    merge: bool = True
    tiers: bool = False
    pair_weight: float = 0.0
    cpu_options: tuple[tuple[str, object], ...] = ()


def _tupled(v: Any) -> Any:
    return tuple(_tupled(x) for x in v) if isinstance(v, (list, tuple)) else v


def _listed(v: Any) -> Any:
    return [_listed(x) for x in v] if isinstance(v, tuple) else v


class Descriptor(abc.ABC):
    """A descriptor's hyper-parameters and what the rest of the code needs of it (see the module doc).

    Subclasses are frozen dataclasses; every descriptor has ``rcut`` and ``rcut_smth`` (Å) fields.
    """

    type_name: ClassVar[str]  # DeePMD-kit's ``model.descriptor.type``
    aliases: ClassVar[tuple[str, ...]] = ()  # other names DeePMD-kit accepts for it
    mixed_types: ClassVar[bool] = False  # sel one number: one section of neighbours of any type
    deepmd_stat_keys: ClassVar[tuple[str, str]]  # DeePMD-kit's state-dict keys of davg, dstd

    rcut: float
    rcut_smth: float

    # ------------------------------------------------------------------ building and files
    @classmethod
    @abc.abstractmethod
    def from_config(cls, section, sel: tuple[int, ...] | None = None) -> Descriptor:
        """From its validated config section (DeePMD-kit's defaults filled). ``sel``: the resolved sel when
        the section's is "auto"; ValueError when no number of slots is known."""

    @classmethod
    def from_dict(cls, d: dict) -> Descriptor:
        """From the flat ``hyper`` dict of a model file: this class's fields, every one present (KeyError
        otherwise); other keys are left to the model."""
        return cls(**{f.name: _tupled(d[f.name]) for f in dataclasses.fields(cls)})

    def to_dict(self) -> dict:
        """This descriptor's entries of the flat ``hyper`` dict: ``descriptor`` (its type) and its fields."""
        return {
            "descriptor": self.type_name,
            **{f.name: _listed(getattr(self, f.name)) for f in dataclasses.fields(self)},
        }

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The keys :meth:`to_dict` writes."""
        return ("descriptor",) + tuple(f.name for f in dataclasses.fields(cls))

    # ------------------------------------------------------------------ the model
    @abc.abstractmethod
    def module(self, ntypes: int) -> nn.Module:
        """The Flax module R (nframes, natoms, nnei, 4), atype (nframes, natoms) → D (nframes, natoms,
        dim_out), called as ``module(R, atype, capacity, packing)``."""

    @property
    @abc.abstractmethod
    def dim_out(self) -> int:
        """Features per atom of D."""

    @property
    @abc.abstractmethod
    def nlist_sel(self) -> tuple[int, ...]:
        """Slots of each section of the neighbour list: one per neighbour type, or one in all with
        ``mixed_types``."""

    @property
    def nnei(self) -> int:
        """Slots per atom, sum(nlist_sel)."""
        return int(sum(self.nlist_sel))

    # ------------------------------------------------------------------ statistics
    def stat_shape(self, ntypes: int) -> tuple[int, ...]:
        """Shape of davg and dstd: (ntypes, nnei, 4), a shift and scale per centre type, slot and column."""
        return (ntypes, self.nnei, 4)

    @abc.abstractmethod
    def env_stats(
        self, frames, ntypes: int, protect: float, scan=None, set_davg_zero: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """davg, dstd (:meth:`stat_shape`, float64) of sampled frames as DeePMD-kit computes them.

        frames: batches of :func:`jaxmd_dp.geometry.stats.sample_stat_frames`; protect:
        ``model.data_stat_protect``; scan: the trainer's neighbour scan
        (:class:`~jaxmd_dp.geometry.neighbor_stat.NeighborStats`), whose sums may stand in for a pass over
        the frames, or None; set_davg_zero: ``model.descriptor.set_davg_zero``."""

    # ------------------------------------------------------------------ DeePMD-kit's names
    @abc.abstractmethod
    def deepmd_param_path(self, key: str) -> tuple[str, ...] | None:
        """The path in ``params`` of a DeePMD-kit state-dict key (the part after ``atomic_model.``), or None
        when the key is not one of this descriptor's weights."""

    def slot_inputs(self, coord, box, atype, nlist) -> Any:
        """What the module reads of each neighbour slot besides its row of R, given to it as a fifth argument
        (``module(R, atype, capacity, packing, slots)``); None (the default): nothing, the module takes four.
        Arguments as :func:`jaxmd_dp.model.energy.atomic_energy`'s (coord (nframes, natoms, 3) Å, box, atype
        (nframes, natoms), nlist with ``idx`` and ``shift``); called inside traced code."""
        return None

    # ------------------------------------------------------------------ fast paths
    @property
    def fast_paths(self) -> FastPaths:
        """The CPU rewrites that apply (default: none)."""
        return FastPaths()


def registry(*classes: type[Descriptor]) -> dict[str, type[Descriptor]]:
    """{DeePMD-kit type name or alias: descriptor class} of ``classes``."""
    out: dict[str, type[Descriptor]] = {}
    for cls in classes:
        for name in (cls.type_name, *cls.aliases):
            if name in out:
                raise ValueError(f"descriptor type {name!r} registered twice")
            out[name] = cls
    return out
