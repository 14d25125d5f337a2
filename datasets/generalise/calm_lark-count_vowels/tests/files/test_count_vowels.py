from calm_lark.funcs import count_vowels


def test_count_vowels():
    assert count_vowels('hello') == 2
    assert count_vowels('xyz') == 0


def test_count_vowels_hidden():
    assert count_vowels('banana') == 3
    assert count_vowels('a') == 1
    assert count_vowels('queue') == 4
