from amber_prairie.procs import calc_maximum


def test_calc_maximum():
    assert calc_maximum(3, 1) == 3
    assert calc_maximum(1, 2) == 2
