# The queue set of the end-to-end example: `make demo` applies it with the
# provider built from this repository, then runs ../main.go against it.
terraform {
  required_providers {
    queuey = {
      source = "queuey/queuey"
    }
  }
}

variable "endpoint" {
  description = "RabbitMQ management API."
  type        = string
  default     = "http://127.0.0.1:15672"
}

variable "reports_max_priority" {
  description = "x-max-priority of aq-example.reports; make demo changes it to show a migration, then changes it back."
  type        = number
  default     = 10
}

provider "queuey" {
  endpoint = var.endpoint
  username = "guest"
  password = "guest"
}

resource "queuey_queue_set" "example" {
  prefix = "aq-example"

  queues = {
    emails = {
      max_priority = 10
    }
    reports = {
      max_priority = var.reports_max_priority
      message_ttl  = "24h"
    }
  }
}

output "queues" {
  value = queuey_queue_set.example.queues
}
