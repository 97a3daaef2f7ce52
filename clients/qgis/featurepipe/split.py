"""Finding the features of a GeoJSON FeatureCollection in its bytes without
parsing it, so that a file is sent in batches of its own bytes, as
`featurepipe push` sends one: Python's JSON parser took 0.5 s for a 13 MB
file here, these bytes methods (which run in C) a few hundredths.

Brackets are only counted where every one of them is JSON's own: in a
file with no backslash whose strings hold none of `{}[]"` (both checked
first). Elsewhere the file is not split."""

_STRUCTURE = b'{}[]"'
_OTHER = bytes(c for c in range(256) if c not in _STRUCTURE)
_BRACKETS_ONLY = bytes(c for c in range(256) if c not in b"{}[]")
_WHITESPACE = b" \t\r\n"
HEAD = b'{"type":"FeatureCollection","features":['
TAIL = b"]}"


def countable(body):
    """Whether every bracket in `body` is JSON's own (none in a string)."""
    if b"\\" in body:
        return False
    # Each string is a pair of quotes with nothing between them here.
    return b'"' not in body.translate(None, _OTHER).replace(b'""', b"")


def depth(body, end, start=0):
    """How much deeper JSON nests at `end` than at `start`."""
    # Counted in the brackets alone: a sixteenth of the bytes, or less.
    brackets = body[start:end].translate(None, _BRACKETS_ONLY)
    return brackets.count(b"{") + brackets.count(b"[") - brackets.count(b"}") - brackets.count(b"]")


def skip_whitespace(body, i):
    while i < len(body) and body[i] in _WHITESPACE:
        i += 1
    return i


def features_array(body):
    """Where the root's `features` array begins (after its `[`), or None."""
    i = body.find(b'"features"')
    while i != -1:
        # A key of the root object (not inside a string: quotes before it pair up).
        if depth(body, i) == 1 and body.count(b'"', 0, i) % 2 == 0:
            j = skip_whitespace(body, i + len(b'"features"'))
            if body[j:j + 1] == b":":
                j = skip_whitespace(body, j + 1)
                return j + 1 if body[j:j + 1] == b"[" else None
        i = body.find(b'"features"', i + 1)
    return None


def top_level_objects(piece):
    """How many objects `piece` (brackets only) is a sequence of, or None
    when it is not one: innermost pairs are taken out, and each object
    left empty becomes an `o`, until only `o`s are left."""
    while True:
        reduced = (piece.replace(b"[]", b"").replace(b"{}", b"o")
                   .replace(b"{o", b"{").replace(b"[o", b"["))
        if reduced == piece:
            return len(piece) if piece.count(b"o") == len(piece) else None
        piece = reduced


def splittable(body):
    """Where the features of the FeatureCollection `body` begin, when its
    brackets can be counted (see above); else None."""
    return features_array(body) if countable(body) else None


def feature_runs(body, start, size):
    """The features of `body` from `start` ([`splittable`]) in runs of about
    `size` bytes, as they are found: (first byte, end, how many features),
    the bytes between being that many whole features one after another.
    ValueError where what follows is not: an element of `features` that is
    not an object, or an array that does not close."""
    pos = skip_whitespace(body, start)
    while body[pos:pos + 1] != b"]":
        cut = next_cut(body, pos, size)
        count = whole_features(body[pos:cut]) if cut else None
        if count is None:
            # The rest, up to the array's end, is the last run.
            piece = body[pos:array_end(body, pos)].rstrip(_WHITESPACE)
            count = whole_features(piece)
            if count is None:
                raise ValueError(f"the features from byte {pos} on are not whole objects")
            yield pos, pos + len(piece), count
            return
        yield pos, cut, count
        pos = skip_whitespace(body, skip_whitespace(body, cut) + 1)


def next_cut(body, pos, size):
    """The end of the first feature that ends `size` bytes or more after
    `pos` and is followed by another: a `}` back at the array's depth, then
    `,`. None when there is none."""
    cut = body.find(b"}", pos + size)
    level, at = 0, pos
    while cut != -1:
        level, at = level + depth(body, cut + 1, at), cut + 1
        after = skip_whitespace(body, cut + 1)
        if level == 0 and body[after:after + 1] == b",":
            return cut + 1
        cut = body.find(b"}", cut + 1)
    return None


def array_end(body, pos):
    """The `]` that closes the array whose elements begin at `pos`: most
    often the file's last but one bracket, else found walking forward."""
    close = body.rfind(b"]")
    if close > pos and depth(body, close, pos) == 0:
        if whole_features(body[pos:close].rstrip(_WHITESPACE)) is not None:
            return close
    level, at = 0, pos
    close = body.find(b"]", pos)
    while close != -1:
        level += depth(body, close, at)
        if level == 0:
            return close
        level, at = level - 1, close + 1
        close = body.find(b"]", close + 1)
    raise ValueError("the features array does not close")


def whole_features(piece):
    """How many whole objects `piece` is, one after another (None: it is not)."""
    if piece[:1] != b"{" or piece[-1:] != b"}":
        return None
    return top_level_objects(piece.translate(None, _BRACKETS_ONLY))
