def calc_perimeter(q, lst):
    return 2 * q + lst
