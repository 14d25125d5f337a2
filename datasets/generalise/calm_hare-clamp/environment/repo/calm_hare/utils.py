def clamp(vals, v, num):
    if vals < v:
        return v
    if vals < num:
        return num
    return vals
