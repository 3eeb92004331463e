"""Interlaced video: every frame holds two fields, pictures taken half a frame apart, woven line by line.

Face work on a woven frame would see two moments at once (combing, baked into the restored face).
So each field of an interlaced video travels the pipeline as a picture of its own, in the order
the fields were taken: its lines alone, half as high, tagged with :class:`~.colour.FieldLines`.
The devices make it whole by line doubling for detection, tracking and restoration, and keep only
its own lines of the result. The encoder gets the frame woven again from its two fields: the lines
of a field without faces are the decoded ones, bit for bit, and the output is coded interlaced
with the input's field order. Both happen here: :func:`split_fields` on the decoder's side,
:func:`weave` on the encoder's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import av

from .colour import FieldLines, copy_colour_tags, frame_planes, planes_to_frame, writable_planes
from .frames import FieldOf, FrameBuffers, SourceFrame

#: AVFieldOrder values: which field is stored and which is shown first.
_PROGRESSIVE, _TT, _BB, _TB, _BT = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class FieldOrder:
    """An interlaced video's field order, as shown: which field was taken first."""

    top_first: bool

    @classmethod
    def of(cls, stream: av.video.stream.VideoStream, first: av.VideoFrame) -> FieldOrder | None:
        """The order the container or bitstream declares, else the order the decoder flags on the
        first frame (AVI stores none, and a DV capture there is bottom field first, as DV always
        is); None when the video is progressive. TB and BT are read as their first letter, the
        field shown first, as FFmpeg's command line writes them (and Final Cut's DV in MOV): the
        H.264 decoder's flag, by contrast, says bottom first for x264's top-first MBAFF."""
        order = stream.codec_context.field_order
        if order in (_TT, _TB):
            return cls(True)
        if order in (_BB, _BT):
            return cls(False)
        if order != _PROGRESSIVE and first.interlaced_frame:
            return cls(_shows_top_first(first))
        return None

    @property
    def name(self) -> str:
        return "top field first" if self.top_first else "bottom field first"

    @property
    def code(self) -> int:
        """The AVFieldOrder an encoder and muxer are given."""
        return _TT if self.top_first else _BB

    @property
    def parities(self) -> tuple[int, int]:
        """The fields' first lines (0 top, 1 bottom), in the order they were taken."""
        return (0, 1) if self.top_first else (1, 0)


def _shows_top_first(frame: av.VideoFrame) -> bool:
    """The decoder's top-field-first flag on ``frame``, which PyAV does not show: a grey copy
    (which keeps the frame's flags) with its top field black and its bottom field white goes
    through FFmpeg's ``separatefields``, whose first field out is the one shown first."""
    marked = frame.reformat(width=16, height=frame.height, format="gray")
    luma = writable_planes(marked)[0]
    luma[0::2], luma[1::2] = 0, 255
    graph = av.filter.Graph()
    source = graph.add_buffer(width=16, height=frame.height, format="gray", time_base=frame.time_base or 1)
    split = graph.add("separatefields")
    source.link_to(split)
    split.link_to(graph.add("buffersink"))
    graph.configure()
    graph.push(marked)
    return int(graph.pull().to_ndarray().mean()) < 128


def field_frame(frame: av.VideoFrame, parity: int) -> av.VideoFrame:
    """The lines of one field of a planar YUV ``frame`` as a frame of their own. A 4:2:0 field's
    chroma rows are every other chroma row; where the frame has an odd number of them, the field
    with one fewer repeats its last (:func:`weave` writes back only the real ones)."""
    field = av.VideoFrame(frame.width, (frame.height - parity + 1) // 2, frame.format.name)
    for dst, plane in zip(writable_planes(field), frame_planes(frame)):
        lines = plane[parity::2]
        dst[: len(lines)] = lines
        dst[len(lines) :] = lines[-1:]
    field.pts = frame.pts
    if frame.time_base is not None:  # a restored frame has none until the encoder times it
        field.time_base = frame.time_base
    return copy_colour_tags(frame, field)


def _write_fields(into: av.VideoFrame, fields: dict[int, av.VideoFrame]) -> av.VideoFrame:
    """``into`` (a frame this code made) with the lines of each field in ``fields`` (by parity) taken from its frame."""
    for parity, field in fields.items():
        for dst, plane in zip(writable_planes(into), frame_planes(field)):
            lines = dst[parity::2]
            lines[:] = plane[: len(lines)]
    return into


def weave(whole: av.VideoFrame, fields: dict[int, av.VideoFrame]) -> av.VideoFrame:
    """A copy of ``whole`` with the lines of each field in ``fields`` (by parity) taken from its frame."""
    return _write_fields(planes_to_frame(frame_planes(whole), whole), fields)


#: Encoders that code interlaced frames -> the options (x264-params / x265-params) that set their
#: field order; the others read it from the codec context or from each frame's flags.
_INTERLACED_PARAMS = {"libx264": {True: ["tff=1"], False: ["bff=1"]},
                      "libx265": {True: ["interlace=tff"], False: ["interlace=bff"]},
                      **{codec: {True: [], False: []}
                         for codec in ("prores_ks", "ffv1", "mpeg2video", "dvvideo", "dnxhd")}}


def encoder_params(codec: str, order: FieldOrder) -> list[str] | None:
    """What ``codec`` is told to code interlaced frames in ``order``, or None when it cannot."""
    params = _INTERLACED_PARAMS.get(codec)
    return None if params is None else params[order.top_first]


def reformat_fields(frame: av.VideoFrame, format: str) -> av.VideoFrame:
    """``frame`` converted to ``format`` field by field: a frame-wide conversion would resample
    the chroma of the two fields, moments apart, into each other."""
    fields = {parity: field_frame(frame, parity).reformat(format=format) for parity in (0, 1)}
    return _write_fields(av.VideoFrame(frame.width, frame.height, format), fields)


class FieldStamp:
    """Flags frames interlaced, in one field order, as FFmpeg's ``setfield`` filter does: ProRes
    codes each frame's field order from its flags, which PyAV cannot set, and restored frames
    are new frames without them."""

    def __init__(self, order: FieldOrder) -> None:
        self.order = order
        self.graph: av.filter.Graph | None = None

    def __call__(self, frame: av.VideoFrame) -> av.VideoFrame:
        if self.graph is None:
            self.graph = av.filter.Graph()
            source = self.graph.add_buffer(width=frame.width, height=frame.height, format=frame.format.name,
                                           time_base=frame.time_base)
            mark = self.graph.add("setfield", "tff" if self.order.top_first else "bff")
            source.link_to(mark)
            mark.link_to(self.graph.add("buffersink"))
            self.graph.configure()
        self.graph.push(frame)
        return copy_colour_tags(frame, self.graph.pull())


def split_fields(source: SourceFrame, order: FieldOrder, field_time: float) -> list[SourceFrame]:
    """The two field pictures of a decoded frame, in the order they were taken, numbered on from
    twice the frame's index; ``field_time`` is the time between them. Each has buffers of its own."""
    pictures = []
    for n, parity in enumerate(order.parities):
        layout = dataclasses.replace(source.layout, field=FieldLines(parity, source.frame.height))
        pictures.append(dataclasses.replace(source, index=2 * source.index + n, frame=field_frame(source.frame, parity),
                                            layout=layout, buffers=FrameBuffers(),
                                            field=FieldOf(source, parity, n * field_time)))
    return pictures
