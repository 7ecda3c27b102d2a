"""A suffix automaton over token ids, built online, and a matcher for another text.

SAM-Decoding (Hu et al., arXiv:2411.10666) drafts what followed the longest suffix of the text so
far that occurred before. A suffix automaton answers that as the text grows: its states are the
classes of substrings with the same end positions, a transition appends a token, a suffix link
drops tokens from the front. pld's n-gram index answers the same question for n <= 3 only.

``SuffixAutomaton.extend`` appends one token (the textbook construction: one new state, at most one
clone) and keeps, per state, the latest position before the newest token where its strings end.
``earlier`` is then the longest suffix of the text that occurred before, with its most recent
earlier occurrence: the suffix link of the whole text's state. ``Matcher`` follows another text
(a draft's context against a static corpus) token by token.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple


class Match(NamedTuple):
    length: int  # tokens matched (0: none)
    end: int  # where an occurrence of them ends in the automaton's text (-1: none)


class SuffixAutomaton:
    """States as parallel lists (a state is an int; 0 is the empty string)."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.next: list[dict[int, int]] = [{}]  # transitions
        self.link: list[int] = [-1]  # suffix link
        self.length: list[int] = [0]  # the longest string of the state
        self.end: list[int] = [-1]  # where the state's strings first end
        self.latest: list[int] = [-1]  # where they last end before the newest token (-1: nowhere yet)
        self.text: list[int] = []
        self.last = 0  # the state of the whole text
        for tok in tokens:
            self.extend(tok)

    def __len__(self) -> int:
        return len(self.text)

    def _new(self, length: int, link: int, end: int, latest: int, nxt: dict[int, int]) -> int:
        self.next.append(nxt)
        self.link.append(link)
        self.length.append(length)
        self.end.append(end)
        self.latest.append(latest)
        return len(self.length) - 1

    def extend(self, tok: int) -> None:
        """Append ``tok``. Costs the length of the old text's suffix-link chain: a few states for
        prose, up to the repeated suffix's length while the text loops."""
        i = len(self.text)
        p = self.last
        while p > 0:  # every suffix of the old text ends at i - 1, now an earlier position
            self.latest[p] = i - 1
            p = self.link[p]
        self.text.append(tok)
        cur = self._new(self.length[self.last] + 1, 0, i, -1, {})
        p = self.last
        while p != -1 and tok not in self.next[p]:
            self.next[p][tok] = cur
            p = self.link[p]
        if p != -1:
            q = self.next[p][tok]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:  # q's shorter strings (up to length[p] + 1) also end at i now: they move to a clone
                clone = self._new(self.length[p] + 1, self.link[q], self.end[q], self.latest[q], dict(self.next[q]))
                while p != -1 and self.next[p].get(tok) == q:
                    self.next[p][tok] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur

    def earlier(self) -> Match:
        """The longest suffix of the text that occurred before, and the end of its latest such
        occurrence (so at least one token follows it)."""
        s = self.link[self.last] if self.last else 0
        return Match(self.length[s], self.latest[s]) if s > 0 else Match(0, -1)


class Matcher:
    """The longest suffix of another text, fed token by token, that occurs in ``automaton``'s text
    (which must not grow meanwhile), and where an occurrence of it ends there (its latest before
    the text's last token, else its first)."""

    def __init__(self, automaton: SuffixAutomaton) -> None:
        self.a = automaton
        self.state, self.length = 0, 0

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

    @property
    def match(self) -> Match:
        if not self.length:
            return Match(0, -1)
        latest = self.a.latest[self.state]
        return Match(self.length, latest if latest >= 0 else self.a.end[self.state])
