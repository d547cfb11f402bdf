"""Block-parity moves: integer changes of the truth that keep every published cell."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt


def partitions(k: int, m: int) -> list[tuple[int, ...]]:
    """Every partition of ``k`` variables into ``m`` nonempty blocks, each block a bitmask."""
    out = []
    for labels in itertools.product(range(m), repeat=k):
        first: list[int] = []
        for label in labels:
            if label not in first:
                first.append(label)
        if first == list(range(m)):
            out.append(tuple(sum(1 << i for i in range(k) if labels[i] == g) for g in range(m)))
    return out


class BlockMoves:
    """Integer moves that keep every published cell: parities of blocks of variables.

    Split the variables into ``m`` blocks and pick a second cell ``q`` besides
    a cell ``c``; the ``2**m`` cells that take, block by block, either ``c``'s
    categories or ``q``'s form a cube, and the move that adds ``s`` to the cells
    with an even number of blocks from ``q`` and subtracts ``s`` from the others
    changes no sum over fewer than ``m`` variables (on any ``m - 1`` blocks
    it sums to zero over the one left). With ``m`` one more than the most
    variables a published cell conditions on, it keeps every published cell,
    so the truth plus the move is an integer point whenever no cell leaves its
    bounds: a witness that frees all ``2**m`` cells. Candidates are checked
    against the constraints anyway before they count.
    """

    def __init__(
        self,
        shape: tuple[int, ...],
        cells: npt.NDArray[np.int64],
        up: npt.NDArray[np.bool_],
        down: npt.NDArray[np.bool_],
        m: int,
        rng: np.random.Generator,
    ) -> None:
        k = len(shape)
        size = int(np.prod(shape, dtype=np.int64))
        self.shape = shape
        self.strides = np.array(
            [int(np.prod(shape[i + 1 :], dtype=np.int64)) for i in range(k)], dtype=np.int64
        )
        self.can = {1: np.zeros(size, dtype=bool), -1: np.zeros(size, dtype=bool)}
        self.can[1][cells] = up
        self.can[-1][cells] = down
        self.rng = rng
        parts = np.array(partitions(k, m), dtype=np.int64).reshape(-1, m)
        self.parts = parts
        subsets = np.arange(2**m)
        member = (subsets[:, None] >> np.arange(m)[None, :]) & 1  # 2^m x m
        self.cube = np.bitwise_or.reduce(np.where(member[None] == 1, parts[:, None, :], 0), axis=2)
        self.odd = member.sum(axis=1) % 2 == 1
        self.bits = ((np.arange(2**k)[None, :] >> np.arange(k)[:, None]) & 1).astype(np.int64)
        self.m = m

    def find(
        self, cell: int, s: int, chunk: int = 512
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """A move adding ``s`` to full cell ``cell``: (cells, changes), or None."""
        if self.parts.size == 0 or not self.can[s][cell]:
            return None
        cc = np.array(np.unravel_index(cell, self.shape), dtype=np.int64)
        # The cell with every block from q has m blocks from q: its sign is s if m is even.
        far = s if self.m % 2 == 0 else -s
        cand = np.stack(np.unravel_index(np.flatnonzero(self.can[far]), self.shape), axis=1)
        order = self.rng.permutation(cand.shape[0])
        even_cols = self.cube[:, ~self.odd]
        odd_cols = self.cube[:, self.odd]
        for start in range(0, min(order.size, 2 * chunk), chunk):
            q = cand[order[start : start + chunk]]
            differ = q != cc[None, :]
            dmask = (differ.astype(np.int64) << np.arange(cc.size)[None, :]).sum(axis=1)
            idx = cell + ((q - cc[None, :]) * self.strides[None, :]) @ self.bits  # nq x 2^k
            ok_s = self.can[s][idx]
            ok_m = self.can[-s][idx]
            valid = ok_s[:, even_cols].all(axis=2) & ok_m[:, odd_cols].all(axis=2)
            valid &= ((dmask[:, None, None] & self.parts[None, :, :]) != 0).all(axis=2)
            hits = np.argwhere(valid)
            if hits.size:
                qi, p = (int(v) for v in hits[0])
                cube = idx[qi, self.cube[p]]
                change = np.where(self.odd, -s, s).astype(np.int64)
                return cube, change
        return None
