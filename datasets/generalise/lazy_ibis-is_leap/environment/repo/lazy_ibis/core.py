def is_leap(t):
    return t % 4 == 0 and (t % 100 == 0 or t % 400 == 0)
