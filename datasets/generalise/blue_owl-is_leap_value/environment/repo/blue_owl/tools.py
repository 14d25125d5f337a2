def is_leap_value(val):
    return val % 4 == 0 and (val % 100 == 0 or val % 400 == 0)
