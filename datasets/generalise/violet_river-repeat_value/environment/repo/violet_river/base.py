def repeat_value(y, w):
    return y * (w - 1)
