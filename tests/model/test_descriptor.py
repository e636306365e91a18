"""The descriptor interface and the one model schema: the registry by DeePMD-kit's type name, DeePMD-kit's
defaults coming from the config only, model files of the flat ``hyper`` dict loading, DeePMD-kit's weight
names covering the Flax tree, the statistics and the fast paths asked of the descriptor."""

from types import SimpleNamespace

import numpy as np
import pytest
from fixture_models import fixture_dir
from flax.traverse_util import flatten_dict

from jaxmd_dp.cli.convert_deepmd import load_state_dict, read_input
from jaxmd_dp.config import DescriptorConfig, FittingNetConfig, model_config_from_dict
from jaxmd_dp.errors import InputError
from jaxmd_dp.model import plan
from jaxmd_dp.model.energy import ModelHyper, default_stats, param_shapes, stats_from_data
from jaxmd_dp.model.fast import pair_pack
from jaxmd_dp.model.hyper import DESCRIPTORS, descriptor_class
from jaxmd_dp.model.se_e2_a import SeE2A

MINIMAL = {"type_map": ["O", "H"], "descriptor": {"type": "se_a", "sel": [46, 92]}, "fitting_net": {}}
# a model.json "hyper" dict as written before the descriptor key (every field present)
OLD_FILE = {
    "type_map": ["O", "H"],
    "sel": [46, 92],
    "rcut": 6.0,
    "rcut_smth": 0.5,
    "neuron": [4, 8],
    "axis_neuron": 2,
    "type_one_side": True,
    "resnet_dt": False,
    "activation": "tanh",
    "fit_neuron": [16, 16],
    "fit_resnet_dt": True,
    "fit_activation": "tanh",
    "precision": "float64",
    "fit_precision": "float64",
}


def test_registry_by_deepmd_type_name():
    assert DESCRIPTORS["se_e2_a"] is SeE2A and DESCRIPTORS["se_a"] is SeE2A
    assert descriptor_class("se_a") is SeE2A
    assert {"se_atten", "dpa1", "se_atten_v2"} <= set(DESCRIPTORS)
    with pytest.raises(ValueError, match="se_e3"):
        descriptor_class("se_e3")


def test_defaults_are_the_configs():
    """A DeePMD-kit model section with only what is required: every other hyper-parameter is the config's
    default, which is DeePMD-kit's (type_one_side false, neuron [10, 20, 40], axis_neuron 4, fitting
    [120, 120, 120])."""
    hyper = ModelHyper.from_deepmd(MINIMAL)
    d, f = hyper.descriptor, hyper.fitting
    defaults = {k.name: k.default for k in DescriptorConfig.__dataclass_fields__.values()}
    fit_defaults = {k.name: k.default for k in FittingNetConfig.__dataclass_fields__.values()}
    assert (d.rcut, d.rcut_smth, d.neuron, d.axis_neuron, d.type_one_side, d.resnet_dt, d.activation) == (
        defaults["rcut"],
        defaults["rcut_smth"],
        defaults["neuron"],
        defaults["axis_neuron"],
        defaults["type_one_side"],
        defaults["resnet_dt"],
        defaults["activation_function"],
    )
    assert (f.neuron, f.resnet_dt, f.activation) == (
        fit_defaults["neuron"],
        fit_defaults["resnet_dt"],
        fit_defaults["activation_function"],
    )
    assert (d.neuron, d.axis_neuron, d.type_one_side, f.neuron) == ((10, 20, 40), 4, False, (120, 120, 120))
    assert d.precision == f.precision == "float64"  # DeePMD-kit's "default"
    assert hyper == ModelHyper.from_config(model_config_from_dict(MINIMAL))
    assert hyper.sel == (46, 92) and hyper.nnei == 138 and hyper.dim_descriptor == 40 * 4


def test_from_deepmd_validates_through_the_config():
    with pytest.raises(InputError, match="model.descriptor.neuron"):
        ModelHyper.from_deepmd({**MINIMAL, "descriptor": {**MINIMAL["descriptor"], "neuron": "wide"}})
    with pytest.raises(InputError, match="model.fitting_net.numb_fparam"):
        ModelHyper.from_deepmd({**MINIMAL, "fitting_net": {"numb_fparam": 2}})
    with pytest.raises(ValueError, match="not a list"):
        ModelHyper.from_deepmd({**MINIMAL, "descriptor": {"type": "se_e2_a", "sel": "auto"}})
    cfg = model_config_from_dict({**MINIMAL, "descriptor": {"type": "se_e2_a", "sel": "auto"}})
    assert ModelHyper.from_config(cfg, sel=(40, 80)).sel == (40, 80)  # "auto" resolved by the caller
    with pytest.raises(ValueError, match="entries for 2 types"):
        ModelHyper.from_config(cfg, sel=(40,))


def test_old_model_files_load_and_round_trip():
    hyper = ModelHyper.from_dict(OLD_FILE)
    assert isinstance(hyper.descriptor, SeE2A)
    assert hyper.descriptor.neuron == (4, 8) and hyper.fitting.neuron == (16, 16)
    assert hyper.type_one_side is True  # the descriptor's hyper-parameters read through
    assert hyper.to_dict() == {"descriptor": "se_e2_a", **OLD_FILE}
    assert ModelHyper.from_dict(hyper.to_dict()) == hyper
    assert hyper.replace(fit_precision="float32").fitting.precision == "float32"
    with pytest.raises(ValueError, match="unknown model hyper-parameters"):
        ModelHyper.from_dict({**OLD_FILE, "attn_layer": 2})
    with pytest.raises(KeyError):
        ModelHyper.from_dict({k: v for k, v in OLD_FILE.items() if k != "axis_neuron"})
    with pytest.raises(AttributeError):
        hyper.no_such_parameter  # noqa: B018


@pytest.mark.parametrize("name", ["water_se_e2_a", "water_pairnets"])
def test_deepmd_names_cover_the_weights(name):
    """Every weight of a DeePMD-kit model maps onto the Flax tree, each path once, with its shape; the
    statistics' keys are the descriptor's."""
    d = fixture_dir(name)
    hyper = ModelHyper.from_deepmd(read_input(d / "out.json")["model"])
    sd = {
        k.split("atomic_model.", 1)[1]: v for k, v in load_state_dict(d / "params.npz").items() if "atomic_model." in k
    }
    mapped = {hyper.deepmd_param_path(k): np.shape(v) for k, v in sd.items() if hyper.deepmd_param_path(k)}
    want = {path: tuple(s.shape) for path, s in flatten_dict(param_shapes(hyper)).items()}
    assert mapped == want
    for key in hyper.descriptor.deepmd_stat_keys:
        assert np.shape(sd[key]) == hyper.descriptor.stat_shape(hyper.ntypes)


def test_fast_paths_and_plan_rules():
    one_side = ModelHyper.from_dict(OLD_FILE)
    two_side = one_side.replace(type_one_side=False)
    assert plan.shares_pairs(one_side) and not plan.shares_pairs(two_side)
    assert plan.tabulates(one_side) and plan.tabulates(two_side)
    assert plan.keep_sizes(one_side, [38, 71]) == pair_pack.keep_sizes([38, 71], (46, 92)) == (40, 72)
    assert plan.pack_sizes(one_side, [10, 61], 4) == pair_pack.pack_sizes([10, 61], 4, (46, 92))
    stats = default_stats(one_side)
    assert stats.davg.shape == one_side.descriptor.stat_shape(2) == (2, 138, 4)
    assert plan.uniform_empty(one_side, stats)
    davg = np.array(stats.davg)
    davg[1, 50, 0] = 0.3  # one slot's empty row differs
    assert not plan.uniform_empty(one_side, stats._replace(davg=davg))


def test_statistics_from_the_descriptor():
    """The descriptor's statistics: one pass over the frames, or the neighbour scan's per-frame sums when
    no sampled system has more neighbours of a type than sel (else the pass, whatever the scan summed)."""
    from shared_paths import require

    from jaxmd_dp.data.sampler import make_batch
    from jaxmd_dp.data.system import load_system
    from jaxmd_dp.geometry.stats import energy_bias, env_mat_stats, env_mat_sums

    system = load_system(require("water") / "data_0", ["O", "H"])
    frames = [make_batch(system, np.array([3, 7]), 0)]
    hyper = ModelHyper.from_dict({**OLD_FILE, "rcut": 4.0, "sel": [20, 40]})
    stats = stats_from_data(hyper, frames, 0.01)
    davg, dstd = env_mat_stats(frames, hyper, 0.01)
    np.testing.assert_array_equal(stats.davg, davg)
    np.testing.assert_array_equal(stats.dstd, dstd)
    np.testing.assert_array_equal(stats.energy_bias, energy_bias(frames, 2))

    per_frame = env_mat_sums(frames, hyper, per_frame=True)
    per_frame[..., 0] /= hyper.nnei  # the scan's sums count centres, not slots
    sums = np.full((system.nframes, 2, 5), np.nan)
    sums[[3, 7]] = per_frame
    scan = SimpleNamespace(env_sums_per_system=[sums], max_nbor_per_system=np.array([[20, 40]]))
    scanned = stats_from_data(hyper, frames, 0.01, scan)
    np.testing.assert_allclose(scanned.davg, davg, rtol=1e-12)
    np.testing.assert_allclose(scanned.dstd, dstd, rtol=1e-12)
    wrong = SimpleNamespace(env_sums_per_system=[np.zeros_like(sums)], max_nbor_per_system=np.array([[21, 40]]))
    np.testing.assert_array_equal(stats_from_data(hyper, frames, 0.01, wrong).davg, davg)  # over sel: the pass
