def perimeter_value(t, item):
    return 2 * t + item
