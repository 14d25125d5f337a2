from bold_kiwi.helpers import starts_with


def test_starts_with():
    assert starts_with('hello', 'he') == True
    assert starts_with('abc', 'b') == False
