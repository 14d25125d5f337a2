from amber_prairie.procs import calc_maximum


def test_calc_maximum():
    assert calc_maximum(3, 1) == 3
    assert calc_maximum(1, 2) == 2


def test_calc_maximum_hidden():
    assert calc_maximum(5, 9) == 9
    assert calc_maximum(-1, -4) == -1
    assert calc_maximum(2, 2) == 2
