"""A suffix automaton over token ids, built online, and a matcher that follows a growing text.

SAM-Decoding (Hu et al., arXiv:2411.10666) drafts what followed the longest suffix of the text so
far that occurred before. A suffix automaton answers that in amortised O(1) a token: its states are
the classes of substrings with the same end positions, a transition appends a token, a suffix link
drops tokens from the front. pld's n-gram index answers the same question for n <= 3 only.

``SuffixAutomaton.extend`` appends one token (the textbook construction: one new state, at most one
clone). ``Matcher`` keeps the longest suffix of a *different* text (or of the same text, if it is
fed each token before the automaton is extended with it) that occurs in the automaton's text, and
where that occurrence ended, so the drafter can read what followed it.
"""

from __future__ import annotations

from typing import Iterable


class SuffixAutomaton:
    """States as parallel lists (a state is an int; 0 is the empty string)."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.next: list[dict[int, int]] = [{}]  # transitions
        self.link: list[int] = [-1]  # suffix link
        self.length: list[int] = [0]  # the longest string of the state
        self.end: list[int] = [-1]  # where an occurrence of the state's strings ends (its first, or a later one)
        self.text: list[int] = []
        self.last = 0  # the state of the whole text
        for tok in tokens:
            self.extend(tok)

    def __len__(self) -> int:
        return len(self.text)

    def _new(self, length: int, link: int, end: int, nxt: dict[int, int]) -> int:
        self.next.append(nxt)
        self.link.append(link)
        self.length.append(length)
        self.end.append(end)
        return len(self.length) - 1

    def extend(self, tok: int) -> None:
        """Append ``tok`` to the text."""
        i = len(self.text)
        self.text.append(tok)
        cur = self._new(self.length[self.last] + 1, 0, i, {})
        p = self.last
        while p != -1 and tok not in self.next[p]:
            self.next[p][tok] = cur
            p = self.link[p]
        if p != -1:
            q = self.next[p][tok]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:  # q's strings split: the shorter ones (up to length[p] + 1) now also end at i
                clone = self._new(self.length[p] + 1, self.link[q], self.end[q], dict(self.next[q]))
                while p != -1 and self.next[p].get(tok) == q:
                    self.next[p][tok] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur


class Matcher:
    """The longest suffix of a text (fed token by token) that occurs in ``automaton``'s text:
    ``length`` tokens, one occurrence of which ends at ``automaton.text[position]``.

    To match a text against itself, feed each token with ``step`` *before* extending the automaton
    with it: the match is then an earlier occurrence, whose continuation exists. ``settle`` after
    the extension keeps the state right if that extension split it."""

    def __init__(self, automaton: SuffixAutomaton) -> None:
        self.a = automaton
        self.state, self.length = 0, 0
        self.recent: dict[int, int] = {}  # state -> the latest end position seen by this matcher

    def step(self, tok: int) -> None:
        a = self.a
        while self.state and tok not in a.next[self.state]:
            self.state = a.link[self.state]
            self.length = a.length[self.state]
        if tok in a.next[self.state]:
            self.state = a.next[self.state][tok]
            self.length += 1
        else:
            self.state, self.length = 0, 0

    def settle(self) -> None:
        a = self.a
        while self.state and self.length <= a.length[a.link[self.state]]:
            self.state = a.link[self.state]

    @property
    def position(self) -> int:
        """Where the matched occurrence ends: the latest one this matcher recorded (``remember``),
        else the automaton's (-1 when nothing matches)."""
        return self.recent.get(self.state, self.a.end[self.state]) if self.length else -1

    def remember(self, end: int) -> None:
        """The matched strings also end at ``end`` (in a self-match, the text's newest token): a
        later visit to this state drafts from there, the most recent occurrence, as pld does."""
        if self.length:
            self.recent[self.state] = end

    def continuation(self, k: int) -> list[int]:
        """Up to ``k`` tokens that followed the matched occurrence."""
        p = self.position
        return self.a.text[p + 1:p + 1 + k] if p >= 0 else []
