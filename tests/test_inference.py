"""load_model, restore and SpeedEstimate: what a user loads, what comes back for each kind of image, how tiling behaves,
and what the page expects restoring to take."""

from __future__ import annotations

import copy
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from PIL import ExifTags, Image, ImageOps
from safetensors.torch import save_file
from torch import nn

from derain.inference import (
    DEFAULT_TILE,
    MAX_PIXELS_UNTILED,
    WEIGHTS_FORMAT,
    RestoreOptions,
    WeightsError,
    WeightsNotFoundError,
    blend_window,
    load_model,
    read_image,
    restore,
    tile_starts,
    timing,
)
from derain.inference.timing import SpeedEstimate
from derain.io import ImageReadError, image_size, read_rgb, to_rgb8
from derain.models import DerainNet, network_record

# Measured with the tiny random-init network on a blurred-noise 256×384 image, tiles of 128 with 32 overlap:
# max 4-5 levels, mean 0.6-0.9 over seeds 0-2. The bound leaves headroom for other seeds and platforms.
TILED_MAX_ABS_DIFF = 10
TILED_MEAN_ABS_DIFF = 1.5


def smooth_image(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur((rng.random((h, w, 3)) * 255).astype(np.uint8), (0, 0), 3)


# ------------------------------------------------------------------------------------------------ load_model


def test_load_model_from_safetensors(tiny_net: DerainNet, tiny_weights: Path) -> None:
    model = load_model(tiny_weights, device="cpu")
    assert not model.training
    assert model.init_args == tiny_net.init_args
    for key, value in tiny_net.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key


def test_load_model_from_lightning_checkpoint(tiny_net: DerainNet, tmp_path: Path) -> None:
    ckpt = {
        "state_dict": {f"net.{k}": v for k, v in tiny_net.state_dict().items()},
        "hyper_parameters": {"lr": 1e-3},
        "derain_net": network_record(tiny_net),
    }
    torch.save(ckpt, tmp_path / "last.ckpt")
    model = load_model(tmp_path / "last.ckpt", device="cpu")
    assert model.init_args == tiny_net.init_args
    assert torch.equal(model.embed[1].weight, tiny_net.embed[1].weight)


def test_load_model_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WeightsNotFoundError, match=r"nope\.safetensors does not exist"):
        load_model(tmp_path / "nope.safetensors")
    with pytest.raises(FileNotFoundError):  # also a FileNotFoundError, for callers that catch that
        load_model(tmp_path / "nope.safetensors")


@pytest.mark.parametrize(
    ("name", "content", "match"),
    [
        ("corrupt.safetensors", b"\x00\x01garbage" * 10, r"corrupt\.safetensors: not a readable safetensors"),
        ("empty.safetensors", b"", r"empty\.safetensors: the weights file is empty"),
        ("corrupt.ckpt", b"PK\x03\x04not a zip", r"corrupt\.ckpt"),
        ("weights.bin", b"x", r"weights\.bin: unknown weights suffix '\.bin'"),
    ],
)
def test_load_model_corrupt_file(tmp_path: Path, name: str, content: bytes, match: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(WeightsError, match=match):
        load_model(tmp_path / name)


def test_load_model_wrong_metadata_or_shapes(tiny_net: DerainNet, tmp_path: Path) -> None:
    state = {k: v.contiguous() for k, v in tiny_net.state_dict().items()}
    save_file(state, tmp_path / "plain.safetensors")  # no metadata
    with pytest.raises(WeightsError, match=r"plain\.safetensors: metadata 'format' is None"):
        load_model(tmp_path / "plain.safetensors")
    other = network_record(tiny_net)
    other = json.dumps({**other, "init_args": {**other["init_args"], "dim": 16}})
    save_file(state, tmp_path / "mismatch.safetensors", metadata={"format": WEIGHTS_FORMAT, "net": other})
    with pytest.raises(
        WeightsError, match=r"mismatch\.safetensors: the weights do not fit the stored network"
    ):
        load_model(tmp_path / "mismatch.safetensors")


def test_load_model_without_packaged_weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import derain.weights

    monkeypatch.setattr(derain.weights, "PACKAGED_WEIGHTS", "not-shipped.safetensors")
    with pytest.raises(WeightsNotFoundError, match=r"no trained weights ship .* --weights FILE"):
        load_model()


def test_public_api_is_reexported() -> None:
    import derain

    assert derain.load_model is load_model
    assert derain.restore is restore


# ------------------------------------------------------------------------------------------------ restore


def test_restore_rgb_uint8_keeps_shape_and_dtype(tiny_net: DerainNet) -> None:
    image = smooth_image(37, 53)  # odd size: the network pads and crops
    out = restore(tiny_net, image)
    assert out.shape == image.shape and out.dtype == np.uint8
    assert out.flags["C_CONTIGUOUS"]


@pytest.mark.parametrize("shape", [(40, 56), (40, 56, 1)])
def test_restore_grayscale_gives_grayscale(tiny_net: DerainNet, shape: tuple[int, ...]) -> None:
    image = smooth_image(40, 56)[:, :, 0].reshape(shape)
    out = restore(tiny_net, image)
    assert out.shape == shape and out.dtype == np.uint8


def test_restore_passes_alpha_through(tiny_net: DerainNet) -> None:
    rgb = smooth_image(40, 56)
    alpha = np.random.default_rng(1).integers(0, 256, (40, 56, 1), dtype=np.uint8)
    out = restore(tiny_net, np.concatenate([rgb, alpha], axis=2))
    assert out.shape == (40, 56, 4) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[:, :, 3:], alpha)
    np.testing.assert_array_equal(out[:, :, :3], restore(tiny_net, rgb))


def test_restore_16bit_keeps_16bit_precision(tiny_net: DerainNet) -> None:
    image8 = smooth_image(40, 56)
    image16 = image8.astype(np.uint16) * 257  # the same picture, 16-bit
    out16 = restore(tiny_net, image16)
    assert out16.shape == image16.shape and out16.dtype == np.uint16
    out8 = restore(tiny_net, image8)
    assert np.abs(out16 / 257.0 - out8).max() <= 0.5 + 1e-6  # same result, finer levels
    assert (out16 % 257 != 0).any()  # not just 8-bit values scaled up


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_model_restores_16_bit_images(tiny_net: DerainNet, dtype: torch.dtype) -> None:
    image = np.random.default_rng(0).integers(0, 65536, (32, 48, 3), dtype=np.uint16)
    image[:8] = 65535  # white: past float16's largest value (65504) unless scaled before the cast
    expected = restore(tiny_net, image).astype(np.int64)
    out = restore(copy.deepcopy(tiny_net).to(dtype), image)
    assert out.dtype == np.uint16
    assert np.abs(out - expected).max() < 0.02 * 65535  # half precision: close to float32, not garbage


def test_restore_rejects_bad_input(tiny_net: DerainNet) -> None:
    with pytest.raises(ValueError, match="uint8 or uint16 pixels, got float32"):
        restore(tiny_net, np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match=r"got \(8, 8, 2\)"):
        restore(tiny_net, np.zeros((8, 8, 2), np.uint8))
    with pytest.raises(ValueError, match=r"need tile >= 0 and 0 <= overlap < tile, got tile=64, overlap=64"):
        restore(tiny_net, np.zeros((8, 8, 3), np.uint8), tile=64, overlap=64)


def test_restore_options_are_checked_once_and_passed_down_whole(tiny_net: DerainNet) -> None:
    """``RestoreOptions`` is the one tiling check (what the commands build); ``restore`` takes it instead of its
    three keywords, with the same result."""
    with pytest.raises(ValueError, match=r"got tile=None, overlap=512"):  # None tiles large images by 512
        RestoreOptions(overlap=512)
    with pytest.raises(ValueError, match=r"got tile=-1, overlap=32"):
        RestoreOptions(tile=-1)
    with pytest.raises(ValueError, match=r"ensemble should be one of \[1, 2, 4\], got 3"):
        RestoreOptions(ensemble=3)
    assert RestoreOptions(tile=0, overlap=600).tile_for(10**7) == 0  # never tiled: any overlap
    assert RestoreOptions().tile_for(MAX_PIXELS_UNTILED + 1) == DEFAULT_TILE
    image = smooth_image(40, 56)
    options = RestoreOptions(tile=32, overlap=8, ensemble=2)
    assert np.array_equal(
        restore(tiny_net, image, options=options), restore(tiny_net, image, tile=32, overlap=8, ensemble=2)
    )
    with pytest.raises(TypeError, match="either in options or on their own"):
        restore(tiny_net, image, options=options, tile=16)


def test_restore_leaves_model_mode_alone(tiny_net: DerainNet) -> None:
    tiny_net.train()
    restore(tiny_net, smooth_image(16, 16))
    assert tiny_net.training
    tiny_net.eval()


# ------------------------------------------------------------------------------------------------ tiling


def test_tile_starts_cover_the_image() -> None:
    assert tile_starts(100, 128, 32) == [0]
    assert tile_starts(1000, 400, 32) == [0, 368, 600]
    for length, tile, overlap in [(256, 128, 32), (384, 128, 32), (1001, 256, 17), (129, 128, 127)]:
        starts = tile_starts(length, tile, overlap)
        assert starts[0] == 0 and starts[-1] + tile == length
        assert all(b - a <= tile - overlap for a, b in zip(starts, starts[1:], strict=False))


def test_blend_window_is_smooth_and_never_zero() -> None:
    w = blend_window(128, 32)
    assert w.min() > 0 and w.max() == 1.0
    assert np.all(w[32:96] == 1.0)
    np.testing.assert_allclose(w, w[::-1])
    assert np.abs(np.diff(w)).max() < 0.05  # no jumps


class PixelWise(nn.Module):
    """A network with no spatial context: tiling must not change its output at all."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.tensor(0.8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain + 0.05


def test_tiled_equals_whole_for_a_pixelwise_network() -> None:
    image = smooth_image(256, 384)
    whole = restore(PixelWise(), image, tile=0)
    tiled = restore(PixelWise(), image, tile=96, overlap=24, batch_size=3)
    np.testing.assert_array_equal(tiled, whole)


def test_tiled_close_to_whole_image(tiny_net: DerainNet) -> None:
    image = smooth_image(256, 384)
    whole = restore(tiny_net, image, tile=0).astype(int)
    tiled = restore(tiny_net, image, tile=128, overlap=32, batch_size=4).astype(int)
    diff = np.abs(whole - tiled)
    assert diff.max() <= TILED_MAX_ABS_DIFF, diff.max()
    assert diff.mean() <= TILED_MEAN_ABS_DIFF, diff.mean()


class Ramps(nn.Module):
    """Ignores the image: a left-to-right ramp (``w``) plus a top-to-bottom ramp (``h``), counting its calls."""

    def __init__(self, w: float, h: float) -> None:
        super().__init__()
        self.w, self.h, self.calls = w, h, 0
        self.anchor = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        ys = torch.linspace(0, 1, x.shape[2])[:, None]
        xs = torch.linspace(0, 1, x.shape[3])[None, :]
        return (self.w * xs + self.h * ys + self.anchor).expand_as(x).contiguous()


def test_ensemble_averages_flips_mapped_back() -> None:
    image = smooth_image(48, 64)
    plain = restore(PixelWise(), image)
    np.testing.assert_array_equal(restore(PixelWise(), image, ensemble=4), plain)  # flip-equivariant: same
    np.testing.assert_array_equal(
        restore(nn.Identity(), image, ensemble=4), image
    )  # returns its input tensor

    net = Ramps(w=1.0, h=0.0)
    out = restore(net, image, ensemble=1)[..., 0].astype(int)
    assert net.calls == 1 and out[0, 0] == 0 and out[0, -1] == 255
    # a mirrored pass whose output were not mirrored back would add the same ramp again, not flatten it
    net = Ramps(w=1.0, h=0.0)
    assert np.abs(restore(net, image, ensemble=2).astype(int) - 128).max() <= 1 and net.calls == 2
    net = Ramps(w=0.5, h=0.5)
    half = restore(net, image, ensemble=2)[..., 0].astype(int)  # the vertical ramp survives mirroring
    assert half[0, 0] == half[0, -1] and half[-1, 0] - half[0, 0] >= 126
    net = Ramps(w=0.5, h=0.5)
    assert np.abs(restore(net, image, ensemble=4).astype(int) - 128).max() <= 1 and net.calls == 4
    tiled = restore(Ramps(w=1.0, h=0.0), smooth_image(96, 200), tile=64, overlap=16, ensemble=2)
    assert np.abs(tiled.astype(int) - 128).max() <= 1
    with pytest.raises(ValueError, match="ensemble should be one of \\[1, 2, 4\\], got 3"):
        restore(PixelWise(), image, ensemble=3)


def test_large_images_are_tiled_automatically(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, ...]] = []

    class Spy(PixelWise):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(tuple(x.shape))
            return super().forward(x)

    image = smooth_image(300, 200)
    restore(Spy(), image, max_pixels_untiled=300 * 200)
    assert seen == [(1, 3, 300, 200)]
    seen.clear()
    out = restore(Spy(), image, max_pixels_untiled=300 * 200 - 1)
    assert out.shape == image.shape and len(seen) == 1 and seen[0] == (1, 3, 300, 200)  # fits one 512 tile
    seen.clear()
    monkeypatch.setattr("derain.inference.image.DEFAULT_TILE", 128)
    restore(Spy(), image, max_pixels_untiled=1000)
    assert len(seen) > 1 and all(s[-2:] == (128, 128) for s in seen)


# ------------------------------------------------------------------------------------------------ strength


def test_strength_1_is_the_network_output_and_0_the_photo(tiny_net: DerainNet) -> None:
    image = smooth_image(40, 56)
    x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255
    with torch.no_grad():
        network = np.rint(tiny_net(x).clamp(0, 1)[0].permute(1, 2, 0).numpy() * 255).astype(np.uint8)
    np.testing.assert_array_equal(restore(tiny_net, image, strength=1.0), network)
    np.testing.assert_array_equal(restore(tiny_net, image), network)  # the default
    gray, deep = image[:, :, 0], image.astype(np.uint16) * 257
    for photo in (image, gray, deep):
        for options in (
            RestoreOptions(strength=0),
            RestoreOptions(tile=32, overlap=8, ensemble=2, strength=0),
        ):
            np.testing.assert_array_equal(restore(tiny_net, photo, options=options), photo)


def test_strength_scales_the_rain_taken_away(tiny_net: DerainNet) -> None:
    """``rainy + s·(derained − rainy)``: on a mid-grey photo nothing reaches 0 or 1, so no clamp hides it."""
    image = smooth_image(40, 56).astype(np.uint16) * 257  # 16-bit: the comparison is not lost in rounding
    x = image / 65535
    for options in (RestoreOptions(), RestoreOptions(tile=32, overlap=8, ensemble=2)):
        removed = restore(tiny_net, image, options=options) / 65535 - x
        assert np.abs(removed).max() > 0.05  # the network does change the photo
        for s in (0.5, 1.5, 2.0):
            assert (x + s * removed).min() > 0 and (x + s * removed).max() < 1
            scaled = replace(options, strength=s)
            np.testing.assert_allclose(
                restore(tiny_net, image, options=scaled) / 65535 - x,
                s * removed,
                rtol=0,
                atol=(1 + s) / 65535,
            )


class Tilt(nn.Module):
    """Brightens the right of what it sees and darkens the left, by up to ``amount``: mirror passes cancel."""

    def __init__(self, amount: float) -> None:
        super().__init__()
        self.amount = nn.Parameter(torch.tensor(amount))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.amount * torch.linspace(-1, 1, x.shape[3])


def test_strength_is_applied_once_after_the_ensemble_and_the_tiles() -> None:
    """The flipped passes are averaged (tiles blended) first, then scaled: at strength 2 each pass alone would
    pass 255 on the right and lose its brightening to the clamp, and the average would come out darker."""
    image = np.full((40, 72, 3), 220, np.uint8)  # 220/255 + 0.1 stays under 1; 220/255 + 0.2 would not
    for options in (RestoreOptions(ensemble=2), RestoreOptions(tile=32, overlap=8, ensemble=2)):
        assert restore(Tilt(0.1), image, options=replace(options, ensemble=1))[:, -1].min() > 240
        np.testing.assert_array_equal(restore(Tilt(0.1), image, options=replace(options, strength=2)), image)


def test_strength_outside_0_to_2_is_refused(tiny_net: DerainNet) -> None:
    image = smooth_image(16, 16)
    for bad in (-0.5, 2.5, float("nan")):
        with pytest.raises(ValueError, match=rf"^strength should be between 0 and 2, got {bad}$"):
            restore(tiny_net, image, strength=bad)
    with pytest.raises(ValueError, match=r"strength should be between 0 and 2, got 3"):
        RestoreOptions(strength=3)
    with pytest.raises(TypeError, match="either in options or on their own"):
        restore(tiny_net, image, options=RestoreOptions(), strength=0.5)


# ------------------------------------------------------------------------------------------------ read_image


def test_read_image_keeps_depth_alpha_and_gray(tmp_path: Path) -> None:
    rgba = np.random.default_rng(0).integers(0, 256, (10, 12, 4), dtype=np.uint8)
    cv2.imwrite(str(tmp_path / "rgba.png"), cv2.cvtColor(rgba, cv2.COLOR_RGBA2BGRA))
    np.testing.assert_array_equal(read_image(tmp_path / "rgba.png"), rgba)
    deep = np.random.default_rng(1).integers(0, 65536, (10, 12, 3), dtype=np.uint16)
    cv2.imwrite(str(tmp_path / "deep.png"), cv2.cvtColor(deep, cv2.COLOR_RGB2BGR))
    np.testing.assert_array_equal(read_image(tmp_path / "deep.png"), deep)
    gray = rgba[:, :, 0]
    cv2.imwrite(str(tmp_path / "gray.png"), gray)
    np.testing.assert_array_equal(read_image(tmp_path / "gray.png"), gray)


def tagged(orientation: int, *, xmp: bool = False) -> dict[str, object]:
    """PIL ``save`` keywords that tag a file with an orientation, in EXIF or (``xmp``) in XMP only."""
    if xmp:
        rdf = "http://www.w3.org/1999/02/22-rdf-syntax-ns#"
        tiff = "http://ns.adobe.com/tiff/1.0/"
        xml = (
            f'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="{rdf}"><rdf:Description '
            f'xmlns:tiff="{tiff}" tiff:Orientation="{orientation}"/></rdf:RDF></x:xmpmeta>'
        )
        return {"xmp": xml.encode()}
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    return {"exif": exif}


FORMATS = {  # file name, and how PIL writes it
    "jpeg": ("photo.jpg", {"quality": 98}),
    "png": ("photo.png", {}),
    "webp": ("photo.webp", {"lossless": True}),
    "tiff": ("photo.tif", {}),
    "jpeg-xmp": ("photo.jpg", {"quality": 98}),
}


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("kind", FORMATS)
def test_readers_turn_photos_upright_as_pil_does(tmp_path: Path, kind: str, orientation: int) -> None:
    # A blocky picture (so JPEG decoders agree closely), 48×64 stored, tagged with an orientation.
    blocks = np.random.default_rng(orientation).integers(0, 256, (6, 8, 3), dtype=np.uint8)
    stored = np.kron(blocks, np.ones((8, 8, 1), np.uint8))
    name, options = FORMATS[kind]
    path = tmp_path / name
    Image.fromarray(stored).save(path, **options, **tagged(orientation, xmp=kind == "jpeg-xmp"))
    with Image.open(path) as im:
        expected = np.asarray(ImageOps.exif_transpose(im).convert("RGB")).astype(int)
    assert expected.shape == ((64, 48, 3) if orientation >= 5 else (48, 64, 3))
    for loaded in (read_image(path), read_rgb(path)):  # one reader under both, so they agree
        assert loaded.shape == expected.shape
        assert np.abs(loaded - expected).mean() < 2.0
    assert image_size(path) == expected.shape[:2]  # the header alone tells the upright size


def png_with_orientation(image: np.ndarray, orientation: int) -> bytes:
    """A PNG of an RGB(A) array of any depth (written by OpenCV), with an eXIf chunk before the pixels."""
    ok, buf = cv2.imencode(".png", cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA))
    assert ok
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = orientation
    body = exif.tobytes().removeprefix(b"Exif\x00\x00")
    chunk = struct.pack(">I", len(body)) + b"eXIf" + body + struct.pack(">I", zlib.crc32(b"eXIf" + body))
    png = buf.tobytes()
    return png[:33] + chunk + png[33:]  # after the signature (8 bytes) and IHDR (25)


@pytest.mark.parametrize(
    ("orientation", "upright"),
    [(2, lambda a: a[:, ::-1]), (5, lambda a: a.swapaxes(0, 1)), (6, lambda a: np.rot90(a, k=-1))],
    ids=["mirror", "transpose", "turn-right"],
)
def test_exif_orientation_keeps_16_bit_and_alpha(
    tmp_path: Path, orientation: int, upright: Callable[[np.ndarray], np.ndarray]
) -> None:
    stored = np.random.default_rng(0).integers(0, 65536, (10, 14, 4), dtype=np.uint16)
    (tmp_path / "deep.png").write_bytes(png_with_orientation(stored, orientation))
    loaded = read_image(tmp_path / "deep.png")
    assert loaded.dtype == np.uint16
    np.testing.assert_array_equal(loaded, upright(stored))
    np.testing.assert_array_equal(read_rgb(tmp_path / "deep.png"), to_rgb8(loaded))


def test_restore_on_exif_rotated_photo(tiny_net: DerainNet, tmp_path: Path) -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    Image.fromarray(smooth_image(40, 64)).save(tmp_path / "rotated.jpg", exif=exif)
    out = restore(tiny_net, read_image(tmp_path / "rotated.jpg"))
    assert out.shape == (64, 40, 3) and out.dtype == np.uint8


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"", "the file is empty"), (b"\x89PNG\r\n\x1a\nbroken", "not a decodable image")],
)
def test_read_image_errors_name_the_file(tmp_path: Path, content: bytes, match: str) -> None:
    (tmp_path / "bad.png").write_bytes(content)
    with pytest.raises(ImageReadError, match=rf"bad\.png: {match}"):
        read_image(tmp_path / "bad.png")
    with pytest.raises(ImageReadError, match=r"missing\.png"):
        read_image(tmp_path / "missing.png")


def test_written_files_get_ordinary_permissions(tmp_path):
    import stat

    from derain.io import default_file_mode, write_image_atomic

    out = tmp_path / "x.png"
    write_image_atomic(out, np.zeros((4, 4, 3), np.uint8))
    assert stat.S_IMODE(out.stat().st_mode) == default_file_mode()


def test_atomic_writes_leave_other_threads_files_their_modes(tmp_path: Path) -> None:
    """Every atomic write asks for the umask; asking must not change it, even for an instant: a file or folder
    that another thread (the page's workers) makes meanwhile would get mode 0666 or 0777."""
    import os
    import stat
    import threading

    from derain.io import default_file_mode

    old_umask = os.umask(0o022)
    stop, asked = threading.Event(), set()

    def ask() -> None:
        while not stop.is_set():
            asked.add(oct(default_file_mode()))

    threads = [threading.Thread(target=ask)]
    modes = set()
    try:
        for thread in threads:
            thread.start()
        for i in range(600):
            (tmp_path / f"f{i}").touch()
            (tmp_path / f"d{i}").mkdir()
            modes.add(oct(stat.S_IMODE((tmp_path / f"f{i}").stat().st_mode)))
            modes.add(oct(stat.S_IMODE((tmp_path / f"d{i}").stat().st_mode)))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        os.umask(old_umask)
    assert (modes, asked) == ({"0o644", "0o755"}, {"0o644"})


def test_the_umask_without_proc_is_the_one_at_import(monkeypatch: pytest.MonkeyPatch) -> None:
    from derain import io

    monkeypatch.setattr(io, "_umask_from_proc", lambda: None)
    assert io.default_file_mode() == 0o666 & ~io._IMPORT_UMASK


# ------------------------------------------------------------------------------------------------ timing


class Slow(nn.Module):
    """Returns its input, advancing a clock by ``delays[i]`` seconds on call i (the last delay after that)."""

    def __init__(self, delays: list[float]) -> None:
        super().__init__()
        self.delays, self.calls, self.clock = delays, 0, 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock += self.delays[min(self.calls, len(self.delays) - 1)]
        self.calls += 1
        return x


def test_the_start_up_reading_is_a_warm_up_then_a_median(monkeypatch: pytest.MonkeyPatch) -> None:
    """A slow first call (set-up) and one slow timed pass (a busy moment) do not make the reading."""
    model = Slow([0.4, 0.3, 0.02, 0.02])
    monkeypatch.setattr(
        timing, "time", SimpleNamespace(perf_counter=lambda: model.clock)
    )  # the model's clock
    speed = SpeedEstimate.measure(model, rounds=3)
    assert model.calls == 4  # the warm-up and three timed passes
    h, w = SpeedEstimate.CALIBRATION
    assert speed.per_megapixel == pytest.approx(0.02 / (h * w / 1e6))


def test_the_estimate_follows_the_measured_photos() -> None:
    speed = SpeedEstimate(50.0, window=3)  # the start-up reading, on a busy CPU
    assert speed.seconds(2 * 10**6, passes=4) == 400.0
    speed.update(2 * 10**6, 1, 2.0)  # 1 s a megapixel
    assert speed.per_megapixel == 1.0  # measured photos replace the start-up reading
    speed.update(10**6, 2, 60.0)  # one slow photo: 30 s a megapixel
    speed.update(5 * 10**5, 4, 2.4)  # 1.2 s
    assert speed.per_megapixel == 1.2  # the median of the three
    speed.update(10**6, 1, 0.5)
    speed.update(10**6, 1, 0.5)
    assert speed.per_megapixel == 0.5  # the window holds the last three
    speed.update(0, 1, 1.0)  # nothing measured: ignored
    assert speed.per_megapixel == 0.5


def test_the_estimate_refuses_readings_that_cannot_be() -> None:
    with pytest.raises(ValueError, match="need per_megapixel > 0 and window >= 1, got 0.0 and 9"):
        SpeedEstimate(0.0)
    with pytest.raises(ValueError, match="rounds should be >= 1, got 0"):
        SpeedEstimate.measure(Slow([0.0]), rounds=0)
