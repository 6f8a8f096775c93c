"""QA, session 10: the spare receive buffer of ``FrameReader`` (a served inline body received
into again for the next frame of its size) against handlers that keep the bytes in other ways
than by the bytearray itself: a memoryview slice (storage keeping a view), a view released
before the next frame.
Over a real socket pair with the toy protocol of ``test_frames_inline``."""

from __future__ import annotations

from test_frames_inline import Toy, _one_at_a_time


class ViewKeeper(Toy):
    """Keeps a memoryview slice of every body (``release``: releases the previous one first)."""

    def __init__(self, release: bool):
        super().__init__()
        self.release = release
        self.views: list[memoryview] = []
        self.ids: list[int] = []

    def serve(self, head: bytes, body: bytearray):
        self.ids.append(id(body))
        if self.release and self.views:
            self.views[-1].release()
        self.views.append(memoryview(body)[1000:2000])
        return super().serve(head, body)


def test_a_body_a_memoryview_still_refers_to_is_never_received_into_again():
    bodies = [bytes([i]) * 50_000 for i in range(1, 7)]
    toy = ViewKeeper(release=False)
    seen = _one_at_a_time(bodies, toy)
    assert [b for _, _, b in seen] == bodies
    assert [bytes(v) for v in toy.views] == [b[1000:2000] for b in bodies]  # every kept view unaltered
    assert len(set(toy.ids)) == len(bodies)


def test_bodies_whose_views_were_released_are_served_whole():
    bodies = [bytes([i]) * 50_000 for i in range(1, 7)]
    toy = ViewKeeper(release=True)
    seen = _one_at_a_time(bodies, toy)
    assert [b for _, _, b in seen] == bodies
    assert bytes(toy.views[-1]) == bodies[-1][1000:2000]

