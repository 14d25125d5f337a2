from red_kiwi.tools import get_starts_with


def test_get_starts_with():
    assert get_starts_with('hello', 'he') == True
    assert get_starts_with('abc', 'b') == False


def test_get_starts_with_hidden():
    assert get_starts_with('abc', 'abc') == True
    assert get_starts_with('xy', 'xyz') == False
    assert get_starts_with('cat', 'c') == True
