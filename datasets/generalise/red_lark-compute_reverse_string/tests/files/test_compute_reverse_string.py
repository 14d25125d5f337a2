from red_lark.ops import compute_reverse_string


def test_compute_reverse_string():
    assert compute_reverse_string('abc') == 'cba'
    assert compute_reverse_string('') == ''


def test_compute_reverse_string_hidden():
    assert compute_reverse_string('ab') == 'ba'
    assert compute_reverse_string('level') == 'level'
    assert compute_reverse_string('xyz') == 'zyx'
