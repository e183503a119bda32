"""The experiment config's schema: pydantic models, hashing, YAML reading, method files and
``key=value`` overrides, one module per config block or job; every public name is imported
from here.

This package imports no component: checking a config against the registered rules, client
objectives and compressors (and what they need from each other) is
[`fedcore.core.compose.configure.build_config`][fedcore.api.build_config], which builds on this
schema."""

from __future__ import annotations

from fedcore.core.config import limits as limits
from fedcore.core.config import safe_yaml as safe_yaml
from fedcore.core.config.blocks import PathSetting as PathSetting
from fedcore.core.config.clients import ClientsConfig as ClientsConfig
from fedcore.core.config.dataset import ALPHA_MAX as ALPHA_MAX
from fedcore.core.config.dataset import DATASETS as DATASETS
from fedcore.core.config.dataset import HUB_PREFIX as HUB_PREFIX
from fedcore.core.config.dataset import HUB_RECORDED as HUB_RECORDED
from fedcore.core.config.dataset import NATURAL_DATASETS as NATURAL_DATASETS
from fedcore.core.config.dataset import SYNTHETIC_DATASETS as SYNTHETIC_DATASETS
from fedcore.core.config.dataset import DatasetConfig as DatasetConfig
from fedcore.core.config.engine import EngineConfig as EngineConfig
from fedcore.core.config.errors import ConfigError as ConfigError
from fedcore.core.config.experiment import RECORDED as RECORDED
from fedcore.core.config.experiment import UNHASHED as UNHASHED
from fedcore.core.config.experiment import ExperimentConfig as ExperimentConfig
from fedcore.core.config.local import LocalConfig as LocalConfig
from fedcore.core.config.method import MethodConfig as MethodConfig
from fedcore.core.config.method_files import load_method as load_method
from fedcore.core.config.method_files import method_names as method_names
from fedcore.core.config.model import GIVEN_FACTORY as GIVEN_FACTORY
from fedcore.core.config.model import IMPORT_PATH as IMPORT_PATH
from fedcore.core.config.model import MODELS as MODELS
from fedcore.core.config.model import ModelConfig as ModelConfig
from fedcore.core.config.overrides import parse_overrides as parse_overrides
from fedcore.core.config.overrides import set_dotted as set_dotted
from fedcore.core.config.paths import PACKAGE_DIR as PACKAGE_DIR
from fedcore.core.config.paths import PACKAGED_CONFIGS as PACKAGED_CONFIGS
from fedcore.core.config.paths import checkout_root as checkout_root
from fedcore.core.config.paths import config_dir as config_dir
from fedcore.core.config.paths import project_root as project_root
from fedcore.core.config.paths import writable_config_dir as writable_config_dir
from fedcore.core.config.privacy import PrivacyConfig as PrivacyConfig
from fedcore.core.config.system import SystemConfig as SystemConfig
from fedcore.core.config.yaml_files import read_yaml as read_yaml

__all__ = [
    "ALPHA_MAX", "DATASETS", "GIVEN_FACTORY", "HUB_PREFIX", "HUB_RECORDED", "IMPORT_PATH",
    "MODELS", "NATURAL_DATASETS", "PACKAGED_CONFIGS", "PACKAGE_DIR", "RECORDED",
    "SYNTHETIC_DATASETS", "UNHASHED", "ClientsConfig", "ConfigError", "DatasetConfig",
    "EngineConfig", "ExperimentConfig", "LocalConfig", "MethodConfig", "ModelConfig",
    "PathSetting", "PrivacyConfig", "SystemConfig", "checkout_root", "config_dir", "limits",
    "load_method", "method_names", "parse_overrides", "project_root", "read_yaml", "safe_yaml",
    "set_dotted", "writable_config_dir",
]
