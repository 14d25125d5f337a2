from fresh_fox.misc import count_vowels_value


def test_count_vowels_value():
    assert count_vowels_value('hello') == 2
    assert count_vowels_value('xyz') == 0


def test_count_vowels_value_hidden():
    assert count_vowels_value('banana') == 3
    assert count_vowels_value('a') == 1
    assert count_vowels_value('queue') == 4
