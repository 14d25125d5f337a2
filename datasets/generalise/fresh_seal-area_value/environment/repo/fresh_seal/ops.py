def area_value(f, cur):
    return f + cur
