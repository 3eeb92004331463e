"""``gpen-video INPUT OUTPUT``: the command line."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from . import __version__

EXAMPLES = """examples:
  gpen-video talk.mp4 talk_restored.mp4                 restore on the first GPU (or the CPU)
  gpen-video talk.mp4 out.mp4 --gpus 0,1                 split the work over two GPUs
  gpen-video old.mov out.mov --codec prores_ks           edit-friendly ProRes output
  gpen-video master.mov out.mov --strict                 refuse anything that cannot be kept
  gpen-video talk.mp4 out.mkv --codec ffv1               lossless output
  gpen-video photo.jpg photo_restored.png                one image
  gpen-video talk.mp4 out.mp4 --tracks-out faces.json    also write what was restored, frame by frame
"""


def _gpus(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gpus takes GPU numbers like 0,1; got {text!r}") from None


def _interrupt(signum: int, frame: object) -> None:
    """Stop like Ctrl-C, once: further signals must not interrupt the clean-up they asked for."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    # Imported here, not at the top: they bring in torch, and a Ctrl-C during those seconds must
    # already find main's handler in place.
    from .faces.detect import DEFAULT_DETECTOR, DETECTORS
    from .model.fast import PRECISIONS
    from .video.segments import SEGMENT_FRAMES
    from .weights import DEFAULT_MODEL, OFFICIAL_MODELS

    p = argparse.ArgumentParser(
        prog="gpen-video", epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Restore the faces in a video (or photo) with GPEN; everything else is kept.")
    p.add_argument("input", type=Path, help="video (mp4, mov, mkv, webm, ...) or image")
    p.add_argument("output", type=Path, help="where to write the result; the container follows the extension")
    p.add_argument("--version", action="version", version=f"gpen-video {__version__}")
    dev = p.add_argument_group("devices")
    dev.add_argument("--gpus", type=_gpus, help="comma-separated CUDA GPU numbers (default: 0 when a GPU exists)")
    dev.add_argument("--device", choices=["cpu", "cuda"], help="force the CPU (slow) or CUDA")
    dev.add_argument("--precision", choices=sorted(PRECISIONS),
                     help="GPEN arithmetic (default fp16 on GPU, fp32 on CPU)")
    dev.add_argument("--batch-size", type=int, default=16,
                     help="faces per GPEN batch, and frames per detection batch up to 1080p (fewer for larger frames)")
    dev.add_argument("--no-compile", dest="compile", action="store_false", default=None,
                     help="skip torch.compile on GPUs (starts faster, runs slower)")
    model = p.add_argument_group("model")
    model.add_argument("--model", default=DEFAULT_MODEL, choices=list(OFFICIAL_MODELS), help="official GPEN checkpoint")
    model.add_argument("--weights", type=Path, help="a GPEN checkpoint file to use instead (never downloads)")
    faces = p.add_argument_group("faces")
    faces.add_argument("--detector", default=DEFAULT_DETECTOR, choices=list(DETECTORS))
    faces.add_argument("--detector-weights", type=Path, help="detector checkpoint file (never downloads)")
    faces.add_argument("--threshold", type=float, default=0.9, help="detection confidence (default 0.9, as GPEN)")
    faces.add_argument("--min-face", type=float, default=0.0, help="ignore faces smaller than this many pixels")
    faces.add_argument("--max-faces", type=int, help="restore at most this many faces per frame (largest score first)")
    faces.add_argument("--strength", type=float, default=1.0, help="blend of restored over original, 0..1")
    faces.add_argument("--smooth", type=float, help="temporal smoothing of face tracks (0 turns it off)")
    faces.add_argument("--tracks-out", type=Path, help="write the faces found and used per frame as JSON")
    enc = p.add_argument_group("encoding")
    enc.add_argument("--codec", help="libx264, libx265, prores_ks, ffv1, libvpx-vp9, libsvtav1, h264_nvenc, hevc_nvenc "
                                     "(default: the input's own codec where the container holds it, else libx264)")
    enc.add_argument("--crf", type=int, help="quality (default: visually lossless for the codec; 0 = lossless x264)")
    enc.add_argument("--preset", help="encoder preset (default: fast for x264/x265)")
    enc.add_argument("--pix-fmt", help="output pixel format (default: the input's, else the closest the encoder "
                                       "takes, with a warning naming the loss)")
    enc.add_argument("--encoder-threads", type=int, default=0,
                     help="encoder threads (default 0: the encoder's own choice, about 1.5 per core for x264)")
    enc.add_argument("--strict", action="store_true",
                     help="refuse, before any work, anything of the input the output cannot keep "
                          "(a stream, flag, alpha, bit depth) instead of warning about it")
    p.add_argument("--allow-truncated", action="store_true",
                   help="restore every frame a cut-off input still holds, instead of refusing it")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.add_argument("--resume", action="store_true",
                   help="encode in segments kept beside OUTPUT; after a crash, the same command with --resume "
                        "continues from the last complete segment")
    p.add_argument("--segment-frames", type=int, default=SEGMENT_FRAMES,
                   help=f"frames per --resume segment (default {SEGMENT_FRAMES}: the most work a crash can lose)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)  # a job killed politely cleans up like Ctrl-C
    try:
        return _main(argv)
    except KeyboardInterrupt:  # before the job started (while the imports ran, say): nothing to keep
        print("gpen-video: interrupted; nothing was written", file=sys.stderr, flush=True)
        # An interrupt inside code that an extension ran while importing marks the interpreter as
        # ended by an unhandled Ctrl-C even though it was handled here, and CPython would then
        # kill itself with SIGINT on exit instead of returning 130. Nothing is open to clean up yet.
        os._exit(130)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from .api import IMAGE_EXTENSIONS, restore_image, restore_video

    logging.basicConfig(level=logging.WARNING, format="gpen-video: %(message)s")
    logging.getLogger("gpen_video").setLevel(logging.WARNING if args.quiet else logging.INFO)
    common = dict(gpus=args.gpus, device=args.device, model=args.model, weights=args.weights,
                  precision=args.precision, detector=args.detector, detector_weights=args.detector_weights,
                  threshold=args.threshold, min_face=args.min_face, max_faces=args.max_faces,
                  strength=args.strength, tracks_out=args.tracks_out, overwrite=args.overwrite,
                  progress=not args.quiet)
    try:
        if args.input.suffix.lower() in IMAGE_EXTENSIONS:
            summary = restore_image(args.input, args.output, **common)
        else:
            summary = restore_video(args.input, args.output, batch_size=args.batch_size, compile=args.compile,
                                    smooth=args.smooth, codec=args.codec, crf=args.crf, preset=args.preset,
                                    pix_fmt=args.pix_fmt, encoder_threads=args.encoder_threads,
                                    resume=args.resume, segment_frames=args.segment_frames,
                                    allow_truncated=args.allow_truncated, strict=args.strict, **common)
    except KeyboardInterrupt:
        kept = "; finished segments are kept for --resume" if args.resume else ""
        print(f"gpen-video: interrupted; nothing was written{kept}", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        print(f"gpen-video: error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 1
    if not args.quiet:
        print(summary.describe(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
