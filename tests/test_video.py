"""Tests of backend.video (frames of MP4/WebM uploads) and video sniffing, on videos made here."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.errors import ImageError
from backend.images import PreparedImage
from backend.upload_kinds import IMAGE, VIDEO, sniff_kind
from backend.video import (
    MAX_FRAMES,
    MIN_FRAME_PATCHES,
    format_timestamp,
    plan_frames,
    prepare_video,
)
from tests.media import budget, frame_colour, make_video, one_line_naming
from tests.test_images import decode, mime

FPS = 10
CODECS = [("clip.mp4", "libx264"), ("clip.webm", "libvpx-vp9")]


def shown_frame(frame: PreparedImage) -> int:
    """Which frame of :func:`tests.media.make_video` this is, from its red level."""
    image = decode(frame).convert("RGB")
    centre = image.getpixel((image.width // 2, image.height // 2))
    assert isinstance(centre, tuple)
    return min(
        range(32),
        key=lambda i: sum(abs(a - b) for a, b in zip(centre, frame_colour(i), strict=True)),
    )


@pytest.mark.parametrize(("name", "codec"), CODECS)
def test_frames_are_evenly_spaced_with_timestamps_in_the_text(
    tmp_path: Path, name: str, codec: str
) -> None:
    video = make_video(tmp_path / name, seconds=3, fps=FPS, codec=codec)
    result = prepare_video(video, budget())
    times = ["00:00.0", "00:00.5", "00:01.0", "00:01.5", "00:02.0", "00:02.5"]  # 2 per second
    assert result.text == f"Frames of {name} at {', '.join(times)}"
    assert [frame.name for frame in result.images] == [f"{name} @ {t}" for t in times]
    assert [shown_frame(frame) for frame in result.images] == [0, 5, 10, 15, 20, 25]
    assert result.notices == [
        f"{name}: 6 frames of the 00:03.0 video sent (320x240 px, 108 tokens each)"
    ]
    assert all(mime(frame) == "image/jpeg" for frame in result.images)


def test_frame_count_is_bounded_by_the_image_slots_left(tmp_path: Path) -> None:
    video = make_video(tmp_path / "clip.mp4", seconds=3, fps=FPS)
    result = prepare_video(video, budget(images=4))
    # Targets 0, 0.75, 1.5 and 2.25 s: the first frame shown at or after each.
    assert [frame.name.split(" @ ")[1] for frame in result.images] == [
        "00:00.0",
        "00:00.8",
        "00:01.5",
        "00:02.3",
    ]
    assert [shown_frame(frame) for frame in result.images] == [0, 8, 15, 23]


@pytest.mark.parametrize("keyframe_interval", [None, 4], ids=["one-keyframe", "every-2s"])
def test_frame_count_is_bounded_by_max_frames(
    tmp_path: Path, keyframe_interval: int | None
) -> None:
    video = make_video(
        tmp_path / "long.mp4", 20, fps=2, size=(64, 48), keyframe_interval=keyframe_interval
    )
    result = prepare_video(video, budget())
    assert len(result.images) == MAX_FRAMES
    seconds = [20 * i / MAX_FRAMES for i in range(MAX_FRAMES)]  # 0, 1.25, 2.5, ...
    shown = [float(frame.name[-4:]) + 60 * int(frame.name[-7:-5]) for frame in result.images]
    assert all(0 <= s - target < 0.5 + 1e-9 for s, target in zip(shown, seconds, strict=True))
    # The colour counts frames modulo 32 (red = 8 * index % 256).
    assert [shown_frame(frame) for frame in result.images] == [round(s * 2) % 32 for s in shown]


def test_frames_shrink_to_fit_the_token_budget(tmp_path: Path) -> None:
    video = make_video(tmp_path / "hd.mp4", seconds=1, fps=FPS, size=(1280, 720))
    result = prepare_video(video, budget(tokens=700))
    # 1 s at 2 frames per second: 2 frames of at most 700 / 2 - 4 = 346 tokens each.
    # Worked by hand: 671x377 (round(720 * 671 / 1280) = round(377.4)) takes 47*26 = 1222
    # patches and costs ceil(671/28) * ceil(377/28) = 24 * 14 = 336 tokens. The next
    # longer side, 672x378, takes 48*27 = 1296 patches, and with 1296 the fit is 685x385
    # (48*27; 686x386 needs 49*27), costing 25 * 14 = 350 > 346. So the per-frame budget is
    # 1295 patches, the most that still gives 671x377.
    assert [(frame.width, frame.height, frame.tokens) for frame in result.images] == [
        (671, 377, 336),
        (671, 377, 336),
    ]
    assert decode(result.images[0]).size == (671, 377)  # the pixels sent, not only the claim
    assert result.notices == [
        "hd.mp4: 2 frames of the 00:01.0 video sent (671x377 px, 336 tokens each)"
    ]
    plan = plan_frames(1.0, 1280, 720, budget(tokens=700))
    assert (plan.count, plan.in_token_limit, plan.width, plan.height, plan.tokens) == (
        2,
        1295,
        671,
        377,
        336,
    )


def test_at_the_smallest_frame_size_frames_are_dropped_instead() -> None:
    # At the floor, 1024 patches, 1920x1080 fits as 601x338 (42*24 = 1008 patches; 602x339
    # needs 43*24 = 1032): ceil(601/28) * ceil(338/28) = 22 * 13 = 286 tokens, 290 with the
    # chat template's 4. Worked in tests/test_images.py FITTED.
    assert MIN_FRAME_PATCHES == 1024
    plan = plan_frames(60.0, 1920, 1080, budget(tokens=3 * 290 + 1))
    assert plan.count == 3 and plan.tokens == 286  # the floor's tokens (maybe more pixels)
    assert plan.width >= 601 and plan.height >= 338
    assert plan_frames(60.0, 1920, 1080, budget(tokens=3 * 290 - 1)).count == 2
    with pytest.raises(ImageError, match=r"even one frame \(290 tokens\)"):
        plan_frames(60.0, 1920, 1080, budget(tokens=289))


def test_a_short_clip_gives_at_least_one_frame() -> None:
    assert plan_frames(0.1, 320, 240, budget()).count == 1


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "00:00.0"), (3.25, "00:03.2"), (3.2, "00:03.2"), (61.5, "01:01.5"), (3725.3, "1:02:05.3")],
)
def test_timestamps(seconds: float, text: str) -> None:
    assert format_timestamp(seconds) == text


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (
            b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + b"\x00" * 64,
            "the video is incomplete (it has no 'moov' box",
        ),
        (b"\x1a\x45\xdf\xa3" + b"junk" * 100, "not a video"),
    ],
    ids=["mp4-header-only", "webm-magic-then-junk"],
)
def test_broken_video_is_one_line_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "upload.bin"
    path.write_bytes(content)
    assert sniff_kind(path) is VIDEO
    with pytest.raises(ImageError) as error:
        prepare_video(path, budget(), name="holiday.mp4")
    assert one_line_naming(error.value, "holiday.mp4").startswith(f"holiday.mp4: {reason}")


def top_level_boxes(data: bytes) -> list[tuple[str, int, int]]:
    """``(type, start, end)`` of each top-level box of a whole MP4 (32-bit sizes only)."""
    boxes, offset = [], 0
    while offset < len(data):
        size = int.from_bytes(data[offset : offset + 4], "big")
        boxes.append((data[offset + 4 : offset + 8].decode(), offset, offset + size))
        offset += size
    return boxes


def test_an_mp4_cut_short_anywhere_is_refused_in_one_sentence(tmp_path: Path) -> None:
    whole = make_video(tmp_path / "whole.mp4", seconds=3).read_bytes()
    boxes = top_level_boxes(whole)
    # PyAV writes the index (moov) after the frames (mdat), as phones and most tools do.
    assert [kind for kind, _, _ in boxes] == ["ftyp", "free", "mdat", "moov"]
    (_, mdat_start, mdat_end), (_, _, moov_end) = boxes[2], boxes[3]
    inside = {
        "mdat": [mdat_start + 8, mdat_start + 100, (mdat_start + mdat_end) // 2, mdat_end - 1],
        "moov": [mdat_end + 8, (mdat_end + moov_end) // 2, moov_end - 1],  # - 1: one byte lost
    }
    cuts = [
        (length, f"the file ends inside its {kind!r} box")
        for kind in inside
        for length in inside[kind]
    ]
    cuts += [(mdat_end + 3, "the file ends inside a box header")]
    cuts += [(mdat_end, "it has no 'moov' box, the index of its frames")]  # cut between boxes
    cut = tmp_path / "upload.bin"
    for length, reason in cuts:
        cut.write_bytes(whole[:length])
        with pytest.raises(ImageError) as error:
            prepare_video(cut, budget(), name="holiday.mp4")
        assert str(error.value) == (
            f"holiday.mp4: the video is incomplete ({reason}), probably cut short while "
            "uploading; upload the whole file again"
        ), length
    # The same bytes, whole, are a video: the refusal is about the cut, nothing else.
    cut.write_bytes(whole)
    assert len(prepare_video(cut, budget(), name="holiday.mp4").images) == 6


def test_no_image_slot_left_is_a_problem_naming_the_file(tmp_path: Path) -> None:
    video = make_video(tmp_path / "clip.mp4", seconds=1)
    with pytest.raises(ImageError, match=r"^clip.mp4: not used: no image slot is left"):
        prepare_video(video, budget(images=0))


def test_sniffing_tells_videos_from_heic_and_from_names(tmp_path: Path) -> None:
    mp4 = make_video(tmp_path / "clip.mp4", seconds=1)
    webm = make_video(tmp_path / "clip.webm", seconds=1, codec="libvpx-vp9")
    assert sniff_kind(mp4) is VIDEO and sniff_kind(webm) is VIDEO
    disguised = tmp_path / "clip.jpg"
    disguised.write_bytes(mp4.read_bytes())
    assert sniff_kind(disguised) is VIDEO
    heic = tmp_path / "photo.heic"
    heic.write_bytes(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic")
    assert sniff_kind(heic) is IMAGE  # same container, a still image
    named = tmp_path / "notes.mp4"
    named.write_text("just text")
    assert sniff_kind(named) is IMAGE
