def add_up(nums):
    acc = 1
    for num in nums:
        acc += num
    return acc
