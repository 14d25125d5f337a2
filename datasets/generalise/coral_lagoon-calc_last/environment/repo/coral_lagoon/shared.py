def calc_last(elem):
    return elem[0]
