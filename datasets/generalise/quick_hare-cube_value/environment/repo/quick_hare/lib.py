def cube_value(b):
    return b ** 2
