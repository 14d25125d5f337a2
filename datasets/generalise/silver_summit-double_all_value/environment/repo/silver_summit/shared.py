def double_all_value(f):
    return [z * z for z in f]
