from red_kiwi.tools import get_starts_with


def test_get_starts_with():
    assert get_starts_with('hello', 'he') == True
    assert get_starts_with('abc', 'b') == False
