"""Finding the features of a GeoJSON FeatureCollection in its bytes without
parsing it, so that a file is sent in batches of its own bytes, as
`featurepipe push` sends one: Python's JSON parser took 0.5 s for a 13 MB
file here, the bytes methods below (which run in C) about 2 ms a 2 MiB
batch.

Where a batch's strings are plain (no backslash, no bracket), its brackets
are counted with bytes methods. Where they are not, its JSON tokens are
read one by one (a regular expression that takes each string whole): some
tenth of a second a batch, still well ahead of reading the features
through QGIS. Each batch is checked on its own as it is cut, so the first
is on its way before the rest of the file has been looked at. How many
features a batch holds is not counted here: the service's answer says."""
import re

# Everything but what delimits JSON's structure and its strings.
_OTHER = bytes(c for c in range(256) if c not in b'{}[]"\\')
_WHITESPACE = b" \t\r\n"
# A string (escapes and all) or a bracket.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}\[\]]', re.DOTALL)
_OPEN = frozenset(b"{[")
_QUOTE = ord('"')
_CLOSE_OBJECT = ord("}")
HEAD = b'{"type":"FeatureCollection","features":['
TAIL = b"]}"


def skip_whitespace(body, i):
    while i < len(body) and body[i] in _WHITESPACE:
        i += 1
    return i


def splittable(body):
    """Where the elements of the root's `features` array begin (after its
    `[`), or None when `body` is no object with one."""
    level = 0
    for token in _TOKEN.finditer(body):
        first = body[token.start()]
        if first == _QUOTE:
            if level == 1 and token.group() == b'"features"':
                j = skip_whitespace(body, token.end())
                if body[j:j + 1] == b":":
                    j = skip_whitespace(body, j + 1)
                    return j + 1 if body[j:j + 1] == b"[" else None
        else:
            level += 1 if first in _OPEN else -1
            if level <= 0:
                return None
    return None


def feature_runs(body, start, size):
    """The elements of the `features` array of `body` from `start`
    ([`splittable`]) in runs of about `size` bytes, as they are found:
    (first byte, end), the bytes between being whole elements one after
    another, and last (first byte, None): the rest of the body, from its
    last run of elements on (the array's end, and the root's members
    after it, which the service reads for their syntax alone)."""
    pos = skip_whitespace(body, start)
    while body[pos:pos + 1] not in (b"]", b""):
        cut = counted_cut(body, pos, size)
        if cut is False:
            cut = scanned_cut(body, pos, size)
        if cut is None:
            yield pos, None
            return
        yield pos, cut
        pos = skip_whitespace(body, skip_whitespace(body, cut) + 1)


def counted_cut(body, pos, size):
    """The end of the first element from `pos` on that ends `size` bytes
    or more after `pos` and is followed by another: a `}` where the
    brackets from `pos` close all they open (none of them the array's
    own), then `,`. None when there is none; False when a string on the
    way is not plain (its brackets could not be told from JSON's)."""
    cut = body.find(b"}", pos + size)
    left, at = b"", pos
    while cut != -1:
        structure = body[at:cut + 1].translate(None, _OTHER)
        # Plain strings, and none left open at `cut`: each is two quotes
        # side by side here.
        if b"\\" in structure or 2 * structure.count(b'""') != structure.count(b'"'):
            return False
        left = unclosed(left + structure.translate(None, b'"'))
        at = cut + 1
        if not left:
            return after_element(body, at)
        if left[:1] in (b"]", b"}"):
            # The array closed on the way: what follows is the root's.
            return None
        cut = body.find(b"}", at)
    return None


def scanned_cut(body, pos, size):
    """counted_cut, reading each token (strings whole) from `pos` on."""
    level = 0
    for token in _TOKEN.finditer(body, pos):
        first = body[token.start()]
        if first == _QUOTE:
            continue
        level += 1 if first in _OPEN else -1
        if level < 0:
            return None
        if level == 0 and first == _CLOSE_OBJECT and token.start() >= pos + size:
            return after_element(body, token.end())
    return None


def after_element(body, end):
    """`end` when another element follows the one ending there, else None."""
    after = skip_whitespace(body, end)
    return end if body[after:after + 1] == b"," else None


def unclosed(brackets):
    """What is left of `brackets` once each pair that opens and closes in
    it is taken out, innermost first (a pass a level of nesting)."""
    while True:
        shorter = brackets.replace(b"{}", b"").replace(b"[]", b"")
        if len(shorter) == len(brackets):
            return brackets
        brackets = shorter


def batch(body, first, end):
    """A FeatureCollection of the run of `body` from `first` to `end`
    (None: to the body's end) of [`feature_runs`], copied once."""
    if end is None:
        return b"".join((HEAD, memoryview(body)[first:]))
    return b"".join((HEAD, memoryview(body)[first:end], TAIL))
