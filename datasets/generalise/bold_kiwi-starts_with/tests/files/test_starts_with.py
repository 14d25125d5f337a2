from bold_kiwi.helpers import starts_with


def test_starts_with():
    assert starts_with('hello', 'he') == True
    assert starts_with('abc', 'b') == False


def test_starts_with_hidden():
    assert starts_with('abc', 'abc') == True
    assert starts_with('xy', 'xyz') == False
    assert starts_with('cat', 'c') == True
