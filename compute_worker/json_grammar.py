"""JSON mode's grammar: a byte-level automaton for one JSON object (RFC 8259), pure.

A state is an immutable tuple, so a token is tried by feeding its bytes to a copy, and refused
at the first byte no JSON object could continue with. Bytes of 0x80 and above (UTF-8 past
ASCII) are taken inside strings only: a token ending mid-character is fine, the next one
finishes it. Whitespace between tokens is bounded (MAX_BLANKS in a row), so a model cannot fill
its answer with blanks; nesting is bounded by MAX_DEPTH.

State: (stack, mode, extra). `stack` holds the open containers ("{" or "["); `mode` says what
comes next:
  VALUE     a value (after "[" or ":"); extra = 1 when "]" may also come (an empty array)
  KEY       a key string or, extra = 1, "}" (an empty object)
  STRING    inside a string; extra = (is a key, bytes of a \\u escape still to come or -1 for
            one escape character)
  NUMBER    inside a number; extra = its part: 0 after "-", 1 after a leading "0", 2 in the
            integer digits, 3 after ".", 4 in the fraction, 5 after "e", 6 after its sign,
            7 in the exponent
  LITERAL   inside true/false/null; extra = the bytes still to come
  COLON     after a key
  AFTER     after a value: "," or the container's close
  DONE      the object is complete (only blanks may follow)
"""
from __future__ import annotations

MAX_DEPTH = 64
MAX_BLANKS = 16
VALUE, KEY, STRING, NUMBER, LITERAL, COLON, AFTER, DONE = range(8)
BLANKS = b" \t\n\r"
DIGITS = b"0123456789"
HEX = b"0123456789abcdefABCDEF"
ESCAPES = b'"\\/bfnrt'
LITERALS = {ord("t"): b"rue", ord("f"): b"alse", ord("n"): b"ull"}
NUMBER_ENDS = {1, 2, 4, 7}  # parts after which a number may end
DIGIT_STEP = {2: 2, 3: 4, 4: 4, 5: 7, 6: 7, 7: 7}  # a number's part after a digit (0: below)

START = ((), VALUE, 0, 0)  # (stack, mode, extra, blanks in a row): the answer's first byte


def complete(state) -> bool:
    return state[1] == DONE


def feed(state, data: bytes):
    """The state after `data`, or None if no JSON object begins with what was fed."""
    for byte in data:
        state = _step(state, byte)
        if state is None:
            return None
    return state


def _step(state, b: int):
    stack, mode, extra, blanks = state
    if mode == STRING:
        return _in_string(stack, extra, b)
    if mode == NUMBER:
        return _in_number(stack, extra, b)
    if mode == LITERAL:
        return (stack, LITERAL, extra[1:], 0) if extra and b == extra[0] else (
            _after_value(stack, b) if not extra else None)
    if b in BLANKS:
        return (stack, mode, extra, blanks + 1) if blanks < MAX_BLANKS else None
    if mode == DONE:
        return None
    if mode == COLON:
        return (stack, VALUE, 0, 0) if b == ord(":") else None
    if mode == AFTER:
        return _after(stack, b)
    if mode == KEY:
        if b == ord('"'):
            return (stack, STRING, (True, 0), 0)
        return _close(stack) if extra and b == ord("}") else None
    return _value(stack, extra, b)  # VALUE


def _value(stack, empty_array_may_close: int, b: int):
    if not stack and b != ord("{"):  # the answer is one object
        return None
    if b == ord("{") or b == ord("["):
        if len(stack) >= MAX_DEPTH:
            return None
        opened = stack + (chr(b),)
        return (opened, KEY, 1, 0) if b == ord("{") else (opened, VALUE, 1, 0)
    if b == ord("]") and empty_array_may_close:
        return _close(stack)
    if b == ord('"'):
        return (stack, STRING, (False, 0), 0)
    if b == ord("-"):
        return (stack, NUMBER, 0, 0)
    if b in DIGITS:
        return (stack, NUMBER, 1 if b == ord("0") else 2, 0)
    if b in LITERALS:
        return (stack, LITERAL, LITERALS[b], 0)
    return None


def _in_string(stack, extra, b: int):
    is_key, escape = extra
    if escape == -1:  # the character after a backslash
        if b == ord("u"):
            return (stack, STRING, (is_key, 4), 0)
        return (stack, STRING, (is_key, 0), 0) if b in ESCAPES else None
    if escape > 0:
        return (stack, STRING, (is_key, escape - 1), 0) if b in HEX else None
    if b == ord('"'):
        return (stack, COLON, 0, 0) if is_key else (stack, AFTER, 0, 0)
    if b == ord("\\"):
        return (stack, STRING, (is_key, -1), 0)
    return (stack, STRING, extra, 0) if b >= 0x20 else None  # no raw control character


def _in_number(stack, part: int, b: int):
    if b in DIGITS:
        step = (1 if b == ord("0") else 2) if part == 0 else DIGIT_STEP.get(part)
        return (stack, NUMBER, step, 0) if step is not None else None
    if b == ord(".") and part in (1, 2):
        return (stack, NUMBER, 3, 0)
    if b in b"eE" and part in (1, 2, 4):
        return (stack, NUMBER, 5, 0)
    if b in b"+-" and part == 5:
        return (stack, NUMBER, 6, 0)
    return _after_value(stack, b) if part in NUMBER_ENDS else None


def _after_value(stack, b: int):
    """The byte that ends a number or literal: a blank, "," or a close."""
    if b in BLANKS:
        return (stack, AFTER, 0, 1)
    return _after(stack, b)


def _after(stack, b: int):
    if b == ord(","):
        return (stack, KEY, 0, 0) if stack[-1] == "{" else (stack, VALUE, 0, 0)
    if b == ord("}") and stack[-1] == "{" or b == ord("]") and stack[-1] == "[":
        return _close(stack)
    return None


def _close(stack):
    rest = stack[:-1]
    return (rest, AFTER, 0, 0) if rest else (rest, DONE, 0, 0)
