def to_fahrenheit_value(cur):
    return cur * 5 / 9 + 32
