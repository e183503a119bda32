"""Tests for fedcore.core.models: shapes, parameter counts, norms, shortcuts, errors,
determinism."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fedcore.core.models import MODEL_NAMES, FedModel, build_model

SMALL_SHAPES = [(1, 8, 8), (1, 28, 28), (3, 32, 32)]
RESNETS = ("resnet20", "resnet56", "resnet110")
CASES = [(n, s) for n in MODEL_NAMES for s in SMALL_SHAPES] + [(n, (3, 64, 64)) for n in RESNETS]


def n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize(("name", "shape"), CASES)
def test_shapes(name: str, shape: tuple[int, int, int]) -> None:
    torch.manual_seed(0)
    model = build_model(name, shape, num_classes=7).eval()
    assert isinstance(model, FedModel) and isinstance(model.head, torch.nn.Linear)
    x = torch.randn(3, *shape)
    with torch.no_grad():
        out, feats, pre = model(x), model.features(x), model.preactivation(x)
    assert out.shape == (3, 7)
    assert feats.shape == pre.shape == (3, model.embed_dim)
    assert model.head.in_features == model.embed_dim
    torch.testing.assert_close(out, model.head(feats))
    if name.startswith("resnet"):
        # ReLU comes before global average pooling: mean(relu(z)) >= relu(mean(z)).
        assert bool((feats >= F.relu(pre) - 1e-6).all())
        assert not torch.allclose(feats, F.relu(pre))
    else:
        torch.testing.assert_close(feats, F.relu(pre))


def test_resnet_identity_on_1x1_final_map() -> None:
    model = build_model("resnet20", (3, 4, 4), 10).eval()  # 4 -> 2 -> 1
    x = torch.randn(2, 3, 4, 4)
    with torch.no_grad():
        torch.testing.assert_close(model.features(x), F.relu(model.preactivation(x)))


def test_mlp_identity_in_train_mode() -> None:
    model = build_model("mlp", (1, 8, 8), 10).train()
    x = torch.randn(4, 1, 8, 8)
    torch.testing.assert_close(model.features(x), F.relu(model.preactivation(x)))


def test_cnn_dropout_active_in_train_only() -> None:
    torch.manual_seed(0)
    model = build_model("cnn", (3, 32, 32), 10)
    assert [m.p for m in (model.dropout1, model.dropout2)] == [0.2, 0.5]
    x = torch.randn(8, 3, 32, 32)
    model.train()
    assert not torch.equal(model.features(x), model.features(x))
    model.eval()
    assert torch.equal(model.features(x), model.features(x))


@pytest.mark.parametrize("shape", SMALL_SHAPES)
@pytest.mark.parametrize("classes", [10, 62])
def test_mlp_param_count(shape: tuple[int, int, int], classes: int) -> None:
    c, h, w = shape
    expected = (c * h * w * 200 + 200) + (200 * 200 + 200) + (200 * classes + classes)
    assert n_params(build_model("mlp", shape, classes)) == expected


@pytest.mark.parametrize("shape", [*SMALL_SHAPES, (3, 64, 64)])
@pytest.mark.parametrize("classes", [10, 100])
def test_cnn_param_count(shape: tuple[int, int, int], classes: int) -> None:
    c, h, w = shape
    flat = 64 * (h // 4) * (w // 4)  # padded 5x5 convs keep size, two 2x2 max-pools
    expected = (
        (c * 64 * 25 + 64)
        + (64 * 64 * 25 + 64)
        + (flat * 384 + 384)
        + (384 * 192 + 192)
        + (192 * classes + classes)
    )
    assert n_params(build_model("cnn", shape, classes)) == expected


@pytest.mark.parametrize("norm", ["batch", "group"])
@pytest.mark.parametrize(
    ("name", "lo", "hi"),
    [("resnet20", 0.26e6, 0.28e6), ("resnet56", 0.84e6, 0.87e6), ("resnet110", 1.70e6, 1.76e6)],
)
def test_resnet_param_counts(name: str, lo: float, hi: float, norm: str) -> None:
    assert lo <= n_params(build_model(name, (3, 32, 32), 10, norm=norm)) <= hi


def conv_norm(cin: int, cout: int) -> int:
    """A bias-free 3x3 conv plus its norm's affine weight and bias."""
    return cin * cout * 9 + 2 * cout


def resnet_count(n: int, in_ch: int, classes: int) -> int:
    """Stem + 3 stages of n blocks (option-A shortcuts are free) + linear head."""
    total = conv_norm(in_ch, 16) + 64 * classes + classes
    for cin, cout in ((16, 16), (16, 32), (32, 64)):
        total += conv_norm(cin, cout) + conv_norm(cout, cout)  # first block
        total += (n - 1) * 2 * conv_norm(cout, cout)
    return total


@pytest.mark.parametrize(("name", "n"), [("resnet20", 3), ("resnet56", 9), ("resnet110", 18)])
def test_resnet_exact_counts(name: str, n: int) -> None:
    for shape, classes in (((3, 32, 32), 10), ((1, 28, 28), 62)):
        assert n_params(build_model(name, shape, classes)) == resnet_count(n, shape[0], classes)
    assert resnet_count(3, 3, 10) == 269_722


def test_resnet20_names() -> None:
    model = build_model("resnet20", (3, 32, 32), 10)
    names = [n for n, _ in model.named_parameters()]
    assert names[:2] == ["conv1.weight", "bn1.weight"]
    assert names[-2:] == ["head.weight", "head.bias"]
    block = [n for n, _ in model.layer1[0].named_children()]
    assert block == ["conv1", "bn1", "conv2", "bn2", "shortcut"]
    assert "layer3.2.conv2.weight" in names


def test_norm_variants_buffers() -> None:
    gn = build_model("resnet20", (3, 32, 32), 10, norm="group")
    bn = build_model("resnet20", (3, 32, 32), 10, norm="batch")
    assert list(gn.buffers()) == []
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in gn.modules())
    assert isinstance(gn.layer1[0].bn1, torch.nn.GroupNorm) and gn.layer1[0].bn1.num_groups == 1
    buffers = dict(bn.named_buffers())
    assert "layer1.0.bn1.running_mean" in buffers and "bn1.running_var" in buffers


def test_group_norm_layout_groups_conv_with_norm() -> None:
    from fedcore.core.models.layout import ParamLayout

    model = build_model("resnet20", (3, 32, 32), 10, norm="group")
    layout = ParamLayout.from_model(model)
    assert "layer1.0.bn1" not in layout.group_names
    assert layout.group_names[:2] == ("conv1", "layer1.0.conv1")
    # stem + 9 blocks x 2 convs + head
    assert len(layout.groups) == 1 + 18 + 1


def test_batch_norm_layout_groups_conv_with_norm_like_group_norm() -> None:
    from fedcore.core.models.layout import ParamLayout

    bn = ParamLayout.from_model(build_model("resnet20", (3, 32, 32), 10, norm="batch"))
    gn = ParamLayout.from_model(build_model("resnet20", (3, 32, 32), 10, norm="group"))
    assert len(bn.groups) == 1 + 18 + 1  # 20 groups, not 39 (one 2C group per BatchNorm)
    assert bn.groups == gn.groups and bn.group_names == gn.group_names


def test_option_a_shortcut_is_parameter_free() -> None:
    model = build_model("resnet20", (3, 32, 32), 10)
    for stage, (cin, cout) in ((model.layer2, (16, 32)), (model.layer3, (32, 64))):
        block = stage[0]
        assert n_params(block.shortcut) == 0
        assert n_params(block) == (cin * cout * 9 + 2 * cout) + (cout * cout * 9 + 2 * cout)
        x = torch.randn(2, cin, 8, 8)
        assert block.shortcut(x).shape == (2, cout, 4, 4)
        torch.testing.assert_close(
            block.shortcut(x)[:, cout // 4 : cout // 4 + cin], x[:, :, ::2, ::2]
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "resnet18"}, "allowed: mlp, cnn, smallcnn, resnet20, resnet56, resnet110"),
        ({"name": "mlp", "norm": "layer"}, "allowed: batch, group"),
        ({"name": "resnet20", "norm": "instance"}, "allowed: batch, group"),
    ],
)
def test_unknown_name_or_norm(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_model(in_shape=(3, 32, 32), num_classes=10, **kwargs)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_deterministic_construction(name: str) -> None:
    torch.manual_seed(123)
    a = build_model(name, (3, 32, 32), 10, norm="group").state_dict()
    torch.manual_seed(123)
    b = build_model(name, (3, 32, 32), 10, norm="group").state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(124)
    c = build_model(name, (3, 32, 32), 10, norm="group").state_dict()
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_smallcnn_is_fedouis_model() -> None:
    # conv3x3(32) -> pool -> conv3x3(64) -> pool -> fc128 -> fc10, ReLU (FedOUI's SmallCNN)
    from fedcore.core.compose.configure import load_config

    model = build_model("smallcnn", (3, 32, 32), 10).eval()
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(32, 3, 3, 3), (32,), (64, 32, 3, 3), (64,), (128, 4096), (128,),
                      (10, 128), (10,)]
    assert n_params(model) == 896 + 18496 + 524416 + 1290
    x = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        h = model.pool(F.relu(model.conv2(model.pool(F.relu(model.conv1(x)))))).flatten(1)
        torch.testing.assert_close(model.preactivation(x), model.fc1(h))  # OUI's H, d = 128
        torch.testing.assert_close(model(x), model.head(F.relu(model.fc1(h))))
    assert load_config(None, ["model.name=smallcnn"]).model.name == "smallcnn"
