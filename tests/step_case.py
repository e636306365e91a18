"""A small random training-step case shared by the step-level tests (the Pallas step against the jnp step,
the float32 step's matmul precision): two types, sel (8, 16), tiny nets, one batch with every label."""

import numpy as np

from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.train.loss import LossPrefs
from jaxmd_dp.train.schedule import exp_decay
from jaxmd_dp.train.step import make_optimizer, make_train_step

HYPER = ModelHyper.from_deepmd(
    {
        "type_map": ["A", "B"],
        "descriptor": {
            "type": "se_e2_a",
            "sel": [8, 16],
            "rcut": 3.5,
            "rcut_smth": 0.8,
            "neuron": [4, 8],
            "axis_neuron": 2,
            "type_one_side": True,
        },
        "fitting_net": {"neuron": [8, 8]},
    }
)
# host statistics in DeePMD-kit's structure (davg in column 0 only, one dstd), per type and slot
STATS = Stats(np.full((2, 24, 4), 0.05) * [1, 0, 0, 0], np.full((2, 24, 4), 0.7), np.array([-1.0, -2.0]))


def random_batch(rng, natoms: int, nframes: int, pbc: bool = True):
    """(batch, box or None, atype): frames of ``natoms`` atoms of two types in a ~6 Å triclinic box (or
    5 Å of open space), with random energy, force and virial labels."""
    box = np.tile((np.eye(3) * 6.0 + rng.uniform(-0.8, 0.8, (3, 3)) * (1 - np.eye(3)))[None], (nframes, 1, 1))
    coord = rng.uniform(0, 1, (nframes, natoms, 3)) @ box[0] if pbc else rng.uniform(0, 5, (nframes, natoms, 3))
    atype = rng.integers(0, 2, natoms)
    batch = {
        "coord": coord,
        "box": box if pbc else np.zeros_like(box),
        "atype": atype,
        "energy": rng.normal(size=nframes),
        "force": rng.normal(size=(nframes, natoms, 3)),
        "virial": rng.normal(size=(nframes, 9)),
        "find_energy": 1.0,
        "find_force": 1.0,
        "find_virial": 1.0,
    }
    return batch, box if pbc else None, atype


def train_step_for(hyper: ModelHyper):
    """(jitted train step, its optimizer) with DeePMD-kit-like loss prefactors and an exponential schedule."""
    schedule = exp_decay(1e-3, 1e-5, 10, 100)
    opt = make_optimizer(schedule)
    return make_train_step(hyper, LossPrefs(0.02, 1, 1000, 1, 0.02, 1), schedule, opt), opt
