"""Build the project's sample media from public-domain material, reproducibly.

The demo needs a clip with a face that visibly benefits from restoration, and it must not depend
on footage we cannot redistribute. So we animate scikit-image's ``astronaut`` (NASA's portrait of
Eileen Collins, public domain) with a slow pan and zoom, degrade every frame like old footage, add
a synthetic speech-like soundtrack (so audio passthrough is exercised), and write an H.264/AAC MP4
with PyAV alone. A fixed seed makes every run produce the same pixels and samples.

    python -m pip install scikit-image    # only needed to run this script
    python samples/make_samples.py        # writes samples/portrait.mp4 and samples/portrait.jpg
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from av.video.reformatter import ColorPrimaries, ColorRange, Colorspace, ColorTrc

HERE = Path(__file__).resolve().parent
WIDTH, HEIGHT = 640, 480
FPS = 25
SECONDS = 4
FRAMES = FPS * SECONDS
AUDIO_RATE = 48_000
AUDIO_CHUNK = 1024  # the AAC encoder's frame size
SEED = 1984
CRF = 28
STILL_INDEX = FRAMES // 2

# Camera path in source-image pixels: the window centre and zoom at the first and last frame.
# At every point the 640x480 window stays inside the 512x512 source, so no border ever shows,
# and the face (about 90x120 source px) is about 150-180 px wide and 200-235 px tall in the output.
START = (215.0, 165.0, 1.7)
END = (280.0, 140.0, 1.9)

# Degradation strength: chosen so the face is clearly damaged yet still detectable.
BLUR_FACTOR = 3.5  # downscale-upscale ratio
NOISE_SIGMA = 6.0  # grey levels, added at the reduced resolution so it looks like grain
JPEG_QUALITY = 22
SATURATION = 0.6
FADE = 0.85  # contrast kept; the rest lifts blacks towards a faded print

# Formants (F1, F2 in Hz) of a few vowels: weighting harmonics by them makes tones sound voiced.
VOWELS = ((730, 1090), (270, 2290), (300, 870), (530, 1840), (570, 840))


def astronaut() -> np.ndarray:
    """The source portrait as (512, 512, 3) RGB; scikit-image is a tool dependency, not a project one."""
    try:
        from skimage.data import astronaut as load
    except ImportError:
        sys.exit("make_samples.py needs scikit-image: run `python -m pip install scikit-image` first")
    return load()


def smoothstep(x: float) -> float:
    """Ease in and out, so the camera starts and stops without a jolt."""
    return x * x * (3.0 - 2.0 * x)


def camera(index: int) -> tuple[float, float, float]:
    """Window centre (x, y) and zoom for one frame, interpolated along the eased path."""
    s = smoothstep(index / (FRAMES - 1))
    cx, cy, zoom = (a + (b - a) * s for a, b in zip(START, END))
    return cx, cy, zoom


def render(source: np.ndarray, index: int) -> np.ndarray:
    """The clean frame: the source seen through the moving, zooming window."""
    cx, cy, zoom = camera(index)
    matrix = np.array([[zoom, 0.0, WIDTH / 2 - zoom * cx],
                       [0.0, zoom, HEIGHT / 2 - zoom * cy]])
    return cv2.warpAffine(source, matrix, (WIDTH, HEIGHT), flags=cv2.INTER_CUBIC)


def fade(rgb: np.ndarray) -> np.ndarray:
    """Wash out colour and contrast like an aged print."""
    image = rgb.astype(np.float32)
    grey = image.mean(axis=2, keepdims=True)
    image = grey + SATURATION * (image - grey)
    return image * FADE + 255.0 * (1.0 - FADE) * 0.5


def degrade(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Old-footage damage: faded colour, lost detail, grain, then blocky JPEG compression."""
    small = (round(WIDTH / BLUR_FACTOR), round(HEIGHT / BLUR_FACTOR))
    low = cv2.resize(fade(rgb), small, interpolation=cv2.INTER_AREA)
    low += rng.normal(0.0, NOISE_SIGMA, low.shape).astype(np.float32)
    blurred = cv2.resize(low, (WIDTH, HEIGHT), interpolation=cv2.INTER_LINEAR)
    bgr = np.clip(blurred, 0, 255).astype(np.uint8)[:, :, ::-1]
    ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise RuntimeError("OpenCV could not JPEG-encode a frame")
    return cv2.imdecode(jpeg, cv2.IMREAD_COLOR)[:, :, ::-1].copy()


def syllable(duration: float, rng: np.random.Generator) -> np.ndarray:
    """One voiced syllable: a gliding harmonic tone shaped by a vowel's formants and a soft envelope."""
    n = round(duration * AUDIO_RATE)
    f0 = np.linspace(rng.uniform(150, 210), rng.uniform(120, 180), n)
    phase = 2 * np.pi * np.cumsum(f0) / AUDIO_RATE
    f1, f2 = VOWELS[rng.integers(len(VOWELS))]
    harmonics = np.arange(1, 25)[:, None]
    freq = harmonics * f0
    weight = np.exp(-((freq - f1) / 150.0) ** 2) + 0.6 * np.exp(-((freq - f2) / 250.0) ** 2) + 0.02
    tone = (weight * np.sin(harmonics * phase)).sum(axis=0)
    return tone * np.sin(np.linspace(0, np.pi, n)) ** 2


def speech_like(rng: np.random.Generator) -> np.ndarray:
    """SECONDS of mono float32 audio: words of 2-4 syllables separated by pauses."""
    out = np.zeros(SECONDS * AUDIO_RATE, np.float32)
    t = 0.3
    while t < SECONDS - 0.8:
        for _ in range(rng.integers(2, 5)):
            tone = syllable(rng.uniform(0.12, 0.26), rng)
            start = round(t * AUDIO_RATE)
            out[start:start + tone.size] += tone[:out.size - start]
            t += tone.size / AUDIO_RATE + rng.uniform(0.02, 0.06)
        t += rng.uniform(0.25, 0.45)
    return (0.5 * out / np.abs(out).max()).astype(np.float32)


def add_video(container: av.container.OutputContainer) -> av.video.stream.VideoStream:
    """An H.264 stream tagged BT.709 limited range, so players and our decoder agree on colour."""
    stream = container.add_stream("libx264", rate=FPS)
    stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
    stream.options = {"crf": str(CRF), "preset": "slow"}
    ctx = stream.codec_context
    ctx.time_base = Fraction(1, FPS)
    ctx.color_range = int(ColorRange.MPEG)
    ctx.colorspace = int(Colorspace.ITU709)
    ctx.color_primaries = int(ColorPrimaries.BT709)
    ctx.color_trc = int(ColorTrc.BT709)
    return stream


def video_frame(rgb: np.ndarray, index: int) -> av.VideoFrame:
    """Convert RGB with the BT.709 limited-range matrix the stream is tagged with."""
    frame = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
        format="yuv420p", dst_colorspace=Colorspace.ITU709, dst_color_range=ColorRange.MPEG,
        dst_color_trc=ColorTrc.BT709, dst_color_primaries=ColorPrimaries.BT709)
    frame.pts = index
    frame.time_base = Fraction(1, FPS)
    return frame


def audio_frames(samples: np.ndarray) -> list[av.AudioFrame]:
    """The soundtrack cut into encoder-sized mono frames with sample-exact timestamps."""
    frames = []
    for start in range(0, samples.size, AUDIO_CHUNK):
        frame = av.AudioFrame.from_ndarray(samples[None, start:start + AUDIO_CHUNK], format="fltp", layout="mono")
        frame.sample_rate = AUDIO_RATE
        frame.pts = start
        frame.time_base = Fraction(1, AUDIO_RATE)
        frames.append(frame)
    return frames


def write_clip(path: Path, frames: list[np.ndarray], samples: np.ndarray) -> None:
    """Mux the frames and the soundtrack into one MP4; the muxer interleaves the streams by time."""
    with av.open(str(path), "w") as container:
        video = add_video(container)
        audio = container.add_stream("aac", rate=AUDIO_RATE, layout="mono")
        for index, rgb in enumerate(frames):
            container.mux(video.encode(video_frame(rgb, index)))
        container.mux(video.encode())
        for frame in audio_frames(samples):
            container.mux(audio.encode(frame))
        container.mux(audio.encode())


def main() -> None:
    """Render, degrade and write the clip, plus one degraded still for single-image restore."""
    rng = np.random.default_rng(SEED)
    source = astronaut()
    frames = [degrade(render(source, i), rng) for i in range(FRAMES)]
    write_clip(HERE / "portrait.mp4", frames, speech_like(rng))
    cv2.imwrite(str(HERE / "portrait.jpg"), frames[STILL_INDEX][:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
    for name in ("portrait.mp4", "portrait.jpg"):
        print(f"wrote samples/{name} ({(HERE / name).stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
