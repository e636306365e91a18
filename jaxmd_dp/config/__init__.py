"""The one configuration schema of jaxmd_dp: our YAML files and DeePMD-kit ``input.json`` / ``out.json``.

A config is five sections, with DeePMD-kit's key names and defaults (DeePMD-kit 3.x ``deepmd/utils/argcheck.py``)::

    model:          type_map, descriptor (se_e2_a, se_atten, se_atten_v2), fitting_net (ener), data statistics
    learning_rate:  exponential decay (type "exp")
    loss:           energy / force / virial prefactors (type "ener")
    optimizer:      Adam (optional section)
    training:       training_data, validation_data, numb_steps, seeds, output files and frequencies

Units follow DeePMD-kit: lengths (``rcut``, ``rcut_smth``) in Å, energies in eV, forces in eV/Å.

Reading
    :func:`load_config` reads ``.yaml`` / ``.yml`` (YAML 1.2 style scalars: ``1e-3`` is a float, only
    ``true``/``false`` are booleans, so an element named ``No`` stays a string) or ``.json``, applies
    ``key.path=value`` overrides, then validates.  :func:`config_from_dict` validates a dict already in
    memory.  Every problem a user can fix raises :class:`~jaxmd_dp.errors.InputError` with one line that
    names the dotted key (and the file, when there is one).

What DeePMD-kit accepts and we do too
    * keys starting with ``_`` anywhere (``_comment``, ``_comment1``...) are dropped, as DeePMD-kit does;
    * DeePMD-kit's key aliases (``n_axis_neuron``, ``n_neuron``, ``numb_step``/``num_steps``/``stop_batch``,
      ``auto_prob_style``, ``sys_weights``, ``numb_batch``) are renamed to the canonical key, and the
      descriptor type ``se_a`` to ``se_e2_a``;
    * every key DeePMD-kit writes into ``out.json`` is known, and each either does what it does in DeePMD-kit
      or, for a feature jaxmd_dp does not have (EMA, stat files, torch.compile, ...), is accepted only at
      DeePMD-kit's default, anything else being an error that names the key and says it is not supported.
      No key is accepted and then ignored.

The result is a tree of frozen, keyword-only dataclasses.  Lists are stored as tuples, so a
:class:`Config` is hashable and ``==`` compares values.  Construction validates (``__post_init__``), so
``dataclasses.replace(cfg.training, numb_steps=10)`` is checked like a file.  :meth:`Config.to_dict` gives
the fully resolved dict (every default filled, data paths resolved) that :func:`config_from_dict` accepts
again.

Files: :mod:`~jaxmd_dp.config.checks` (value checkers), :mod:`~jaxmd_dp.config.fixed` (DeePMD-kit keys
accepted at one value), :mod:`~jaxmd_dp.config.section` (the sections' base), the sections in
:mod:`~jaxmd_dp.config.model`, :mod:`~jaxmd_dp.config.optimization`, :mod:`~jaxmd_dp.config.training` and
:mod:`~jaxmd_dp.config.schema` (the whole :class:`Config`), :mod:`~jaxmd_dp.config.parse` (dict -> sections)
and :mod:`~jaxmd_dp.config.reading` (files, overrides, the entry points).
"""

from jaxmd_dp.config.checks import ACTIVATIONS, KERNELS, PRECISIONS, TABLE_MAX_NODES, TABLE_MIN_NODES
from jaxmd_dp.config.model import DescriptorConfig, FittingNetConfig, ModelConfig, SeAttenConfig, SeAttenV2Config
from jaxmd_dp.config.optimization import LearningRateConfig, LossConfig, OptimizerConfig
from jaxmd_dp.config.reading import config_from_dict, load_config, model_config_from_dict
from jaxmd_dp.config.schema import Config
from jaxmd_dp.config.training import TrainingConfig, TrainingDataConfig, ValidationDataConfig

__all__ = [
    "ACTIVATIONS",
    "KERNELS",
    "PRECISIONS",
    "TABLE_MAX_NODES",
    "TABLE_MIN_NODES",
    "Config",
    "DescriptorConfig",
    "FittingNetConfig",
    "LearningRateConfig",
    "LossConfig",
    "ModelConfig",
    "OptimizerConfig",
    "SeAttenConfig",
    "SeAttenV2Config",
    "TrainingConfig",
    "TrainingDataConfig",
    "ValidationDataConfig",
    "config_from_dict",
    "load_config",
    "model_config_from_dict",
]
